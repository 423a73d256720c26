#pragma once
// A bench writes its own copy of a user's cluster file into a scratch directory; the paths in
// that file are relative to where the original lives, so the copy gets them made absolute.
#include <yaml-cpp/yaml.h>

#include <string>

namespace dls::cli {

/// The cluster file at `path`, with every path it names (model.path, auth.*_file,
/// auth.tls_dir, http.api_keys_file, scheduler.quality, scheduler.profile) made absolute by
/// the rule the cluster parser applies. Other fields are left as they are.
YAML::Node cluster_file_with_absolute_paths(const std::string& path);

}  // namespace dls::cli
