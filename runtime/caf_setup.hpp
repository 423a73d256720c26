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
/// loopback round trips 3-5x slower on 2 cores), and BASP heartbeats every 200 ms with a
/// 15 s connection timeout, so a hung peer's connection is dropped instead of waited on
/// forever (cluster processes use heartbeat.dead_after_ms instead, see process_caf_args).
/// A system that only talks to actors in its own process may use this alone; every process
/// that publishes or connects goes through configure_networked_caf (runtime/transport.hpp),
/// which adds the openssl module (`with_openssl`) and the certificate settings.
void configure_caf(caf::actor_system_config& cfg, const std::vector<std::string>& args, bool with_openssl = false);

}  // namespace dls::runtime
