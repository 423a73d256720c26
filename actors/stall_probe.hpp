#pragma once
// A lag probe for a process's CAF scheduler: an actor that wakes itself at a fixed interval and
// logs a line when a wake-up comes much later than asked for. A late wake-up means every
// scheduler thread was busy or blocked that long, so that no actor of the process (a handshake,
// a status query, a heartbeat reply) was served meanwhile; the line says when and how long.
#include <caf/fwd.hpp>

#include <string>

namespace dls::actors {

/// Spawns the probe; `who` names the process in its log lines ("head", "node node0").
void spawn_stall_probe(caf::actor_system& sys, const std::string& who);

}  // namespace dls::actors
