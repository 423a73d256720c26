#pragma once
// One place that turns the YAML `caf:` section into a ready actor_system_config, so
// the head, nodes, CLI and embedding programs all speak the same wire types and use
// the same scheduler defaults.
#include <caf/actor_system_config.hpp>

#include <string>
#include <vector>

namespace dls::runtime {

/// Loads the middleman, registers DiLaServe's message types and applies
/// `args` ("--scheduler.max-threads=2", ...) over the defaults below. Throws
/// std::runtime_error with CAF's message when an option is unknown or malformed.
///
/// Defaults: the `sharing` scheduler with 2 threads (spinning `stealing` workers made
/// loopback round trips 3-5x slower on 2 cores), and BASP heartbeats every 200 ms so a
/// hung peer's connection times out within about a second.
void configure_caf(caf::actor_system_config& cfg, const std::vector<std::string>& args);

}  // namespace dls::runtime
