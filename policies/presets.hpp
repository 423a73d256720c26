#pragma once
// Named policy sets: the four compared systems and the ablations, each a choice of mechanisms.
// Every set runs in the same harness (the simulator, and live TP groups through group_step.hpp), so a
// difference in results comes only from the mechanisms switched on.
#include "policies/migration.hpp"
#include "policies/scheduler.hpp"

#include <string>
#include <vector>

namespace dls::policy {

struct policy_set {
  std::string name;
  queue_order order = queue_order::fcfs;   // batch formation and admission order
  bool demote_late = false;                // least slack: serve on-time requests first
  bool tau_per_request = false;            // threshold controller, per-request stage
  bool tau_load_cap = false;               // threshold controller, aggregate cap
  bool reconfigure = false;                // reconfiguration optimizer
  migration_mode migration = migration_mode::none;
  bool split_refresh = false;              // layer-split refreshes under the slack budget
  bool co_run = false;                     // refresh and reuse steps side by side, where the cluster models it
};

/// static | deadline | migration | dilaserve, and the ablations
///   tau-only, reconfig-only, migrate-only   (one DiLaServe mechanism on top of static)
///   deadline-tau   (least slack and tau control; with no-migrate and dilaserve the cumulative
///   ablation deadline, +tau, +reconfiguration, +migration)
///   no-tau, no-reconfig, no-migrate, no-deadline, no-split, no-co-run   (DiLaServe minus one
///   mechanism).
/// Throws std::invalid_argument for an unknown name.
policy_set make_policy_set(const std::string& name);
std::vector<std::string> policy_set_names();

}  // namespace dls::policy
