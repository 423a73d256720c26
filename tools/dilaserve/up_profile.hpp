#pragma once
// The step-cost profile `dilaserve up` gives the policies when the cluster file names none:
// measured here on this machine's CPU engine (steps and the UCX link), and cached.
#include "runtime/cluster_config.hpp"

#include <string>

namespace dls::cli {

/// Returns the profile's path: the file's `scheduler.profile`, else `state_dir`/profile.yaml,
/// measured unless the state directory or `shared_cache` (a directory; "" for none) already
/// holds one for the same key. The key names what the measurement depends on: the model (its
/// path and its files' sizes and times), the TP degrees, the block, the longest admitted canvas,
/// ucx.tls, and this dilaserve executable. Returns "" when nothing can be measured here (device
/// kinds other than cpu), and says why.
std::string ensure_profile(const runtime::cluster_config& cfg, const std::string& state_dir,
                           const std::string& shared_cache);

}  // namespace dls::cli
