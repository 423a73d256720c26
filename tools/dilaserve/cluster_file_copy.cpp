#include "dilaserve/cluster_file_copy.hpp"

#include "config/yaml_checker.hpp"

#include <filesystem>

namespace dls::cli {

YAML::Node cluster_file_with_absolute_paths(const std::string& path) {
  auto root = YAML::LoadFile(path);
  const auto base = std::filesystem::absolute(std::filesystem::path(path)).parent_path().string();
  auto absolute = [&](YAML::Node parent, const char* key) {
    if (!parent || !parent.IsMap()) return;
    auto n = parent[key];
    if (n && n.IsScalar()) n = config::resolve_path(n.as<std::string>(), base);
  };
  absolute(root["model"], "path");
  for (const char* key : {"token_file", "submit_token_file", "node_token_file", "tls_dir"}) absolute(root["auth"], key);
  absolute(root["http"], "api_keys_file");
  absolute(root["scheduler"], "quality");
  absolute(root["scheduler"], "profile");
  return root;
}

}  // namespace dls::cli
