#pragma once
// Factories for the actors of a DiLaServe process. Each actor lives in its own file;
// these are the only entry points other files use.
#include "actors/peer_roles.hpp"
#include "runtime/cluster_config.hpp"
#include "runtime/head_journal.hpp"
#include "runtime/messages.hpp"
#include "runtime/request_limits.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <functional>
#include <memory>
#include <string>

namespace dls::actors {

/// The head's membership + directory actor. `on_shutdown` runs once a client asked
/// the cluster to stop and every node was told.
caf::actor spawn_head_core(caf::actor_system& sys, const runtime::cluster_config& cfg, peer_registry_ptr peers,
                           std::function<void()> on_shutdown, runtime::head_journal_ptr journal = nullptr);

/// Spawns the supervisor and the reconfigurer next to `core` and tells it about them.
struct head_actors {
  caf::actor core;
  caf::actor supervisor;
  caf::actor reconfigurer;
  caf::actor migrator;
  runtime::head_actor endpoint;  // the authenticated client endpoint
  runtime::gate_actor gate;      // the only published actor
  peer_registry_ptr peers;       // which remote nodes showed which credential
};
/// `journal`: where the head persists its state (nullptr: nowhere); what it recovered at open
/// (requests in flight, node incarnations, layouts, policy) is where the actors start from.
head_actors spawn_head(caf::actor_system& sys, const runtime::cluster_config& cfg,
                       std::function<void()> on_shutdown, runtime::head_journal_ptr journal = nullptr);

/// `peers` nullptr: a supervisor that takes messages from actors of its own process only.
/// `policy`: the policy set the groups start with (scheduler.policy); `policy set` changes it.
/// `journal`: accepted requests are logged (synced) before they start, and the requests it
/// recovered are started again from their last canvas.
caf::actor spawn_supervisor(caf::actor_system& sys, caf::actor core, runtime::engine_defaults defaults,
                            peer_registry_ptr peers = nullptr, std::string policy = "static",
                            runtime::head_journal_ptr journal = nullptr);
/// `cfg`: the nodes' initial layouts, the `reconfigure` settings and the scheduler's profile.
caf::actor spawn_reconfigurer(caf::actor_system& sys, caf::actor core, caf::actor supervisor,
                              runtime::cluster_config cfg = {});

/// The live migration planner: calls policy::plan_migrations while the policy set migrates.
caf::actor spawn_migrator(caf::actor_system& sys, caf::actor core, caf::actor supervisor,
                          runtime::cluster_config cfg);

/// One request's actor at the head: lifecycle, deadline, canvas snapshot, client answer.
/// `peers` nullptr: it takes progress only from actors of its own process.
/// `journal`: its snapshots and its end are logged there. `recovered`: a request a restarted
/// head found in its log (arrival, last canvas); nullptr for a new one.
struct started_request {
  caf::actor actor;
  runtime::work_item first_item;  // what the supervisor places: the request does not ask it to
};
started_request spawn_request(caf::actor_system& sys, uint64_t id, runtime::submit_spec spec,
                              runtime::engine_defaults defaults, caf::actor core, caf::actor supervisor,
                              peer_registry_ptr peers = nullptr, runtime::head_journal_ptr journal = nullptr,
                              const runtime::journal_request* recovered = nullptr, bool listed = true);

}  // namespace dls::actors
