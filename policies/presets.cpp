#include "policies/presets.hpp"

#include <stdexcept>

namespace dls::policy {

namespace {

policy_set everything(const std::string& name) {
  policy_set p;
  p.name = name;
  p.order = queue_order::least_slack;
  p.demote_late = true;
  p.tau_per_request = true;
  p.tau_load_cap = true;
  p.reconfigure = true;
  p.migration = migration_mode::deadline;
  p.split_refresh = true;
  p.co_run = true;
  return p;
}

}  // namespace

std::vector<std::string> policy_set_names() {
  return {"static",        "deadline",     "migration", "dilaserve",   "tau-only",   "reconfig-only", "migrate-only",
          "deadline-tau",  "no-tau",       "no-reconfig", "no-migrate", "no-deadline", "no-split",    "no-co-run"};
}

policy_set make_policy_set(const std::string& name) {
  policy_set p;
  p.name = name;
  if (name == "static") return p;
  if (name == "deadline") {
    p.order = queue_order::least_slack;
    p.demote_late = true;
    return p;
  }
  if (name == "migration") {
    p.migration = migration_mode::balance;
    return p;
  }
  if (name == "dilaserve") return everything(name);
  if (name == "tau-only") {
    p.tau_per_request = p.tau_load_cap = true;
    return p;
  }
  if (name == "reconfig-only") {
    p.reconfigure = true;
    return p;
  }
  if (name == "migrate-only") {
    p.migration = migration_mode::deadline;
    return p;
  }
  if (name == "deadline-tau") {  // the second step of the cumulative ablation: deadline, +tau, +reconfig, +migration
    p.order = queue_order::least_slack;
    p.demote_late = true;
    p.tau_per_request = p.tau_load_cap = true;
    return p;
  }
  p = everything(name);
  if (name == "no-tau") {
    p.tau_per_request = p.tau_load_cap = false;
  } else if (name == "no-reconfig") {
    p.reconfigure = false;
  } else if (name == "no-migrate") {
    p.migration = migration_mode::none;
  } else if (name == "no-split") {
    p.split_refresh = false;
  } else if (name == "no-co-run") {
    p.co_run = false;
  } else if (name == "no-deadline") {
    p.order = queue_order::fcfs;
    p.demote_late = false;
  } else {
    throw std::invalid_argument("unknown policy '" + name + "'");
  }
  return p;
}

}  // namespace dls::policy
