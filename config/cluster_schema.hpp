#pragma once
// The sections the running cluster's file (runtime/cluster_config.hpp) and the simulator's
// (tools/sim/cluster.hpp) have in common, with one parser each: the nodes and their TP layout,
// the engine's decode defaults, the scheduler's knobs and when TP groups regroup. Each file
// allows the shared keys of a section plus its own (the simulator's extend them with what only
// it models), so one key means one thing with one default in both. Schema: docs/config.md.
#include "common/decode_settings.hpp"
#include "common/layout.hpp"
#include "config/yaml_checker.hpp"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace dls::config {

/// The devices of one node: `cpu` core slots, or `cuda` device ids.
struct device_spec {
  std::string kind = "cpu";
  int count = 0;             // cpu: number of core slots
  std::vector<int> ids;      // cuda: device ids
  int slots() const { return kind == "cpu" ? count : static_cast<int>(ids.size()); }
};

struct node_config {
  std::string name;
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: the node picks a free port when it starts
  device_spec devices;
  common::tp_layout groups;  // initial TP degrees, e.g. {2} or {1, 1}
  int replicas = 1;          // simulator: this many identical nodes
};

/// Decoding defaults that a request may override (tau per request), and the batch of a step.
struct engine_defaults {
  // A refresh every 4 steps inside a block: requests move between groups only at refresh
  // boundaries, so this also bounds how long a split or merge waits (docs/config.md).
  engine_defaults() { decode.refresh_interval = 4; }
  common::decode_settings decode;
  int max_batch = 8;  // requests per group step
};

/// The policies the cluster decides with (docs/config.md, "scheduler"): a policy set of
/// policies/presets.hpp and its knobs. The profile and quality files are read when the file
/// is parsed, so every node gets their text from the head.
struct scheduler_settings {
  std::string policy = "static";
  double slo_scale = 2.0;      // deadline without slo_ms: arrival + slo_scale x solo latency
  // What a request's path outside the engine adds to its solo latency (ms): the hops from the
  // head to a group and back, which the profile does not see. < 0 (`measure`, the default):
  // the head times lone probe requests when every node has joined (docs/runtime.md).
  double slo_request_overhead_ms = -1;
  int token_budget = 8192;     // query rows per group step
  int max_active = 64;         // requests admitted per group at once
  double tau_min = 0.7;        // lowest tau the controller may choose
  double tau_step = 0.05;      // spacing of the controller's tau levels
  // Quality SLO of tau control: mean expected accuracy loss per request against the
  // reference tau (fraction; 0.01 = one point), enforced by policy::accuracy_ledger.
  // `none` (< 0): no budget, tau_min alone bounds the loss.
  double accuracy_budget = 0.01;
  // The tau cap counts the work the group's own arrivals of the last cap_forecast_ms predict
  // (policies/threshold.hpp), recomputed at most every cap_forecast_refresh_ms.
  int cap_forecast_ms = 2000;
  int cap_forecast_refresh_ms = 500;
  // Between changes of its requests a group re-runs tau control at most this often (ms): a
  // few steps of a large model and many of the shipped one, while slack changes by little
  // more than the steps taken meanwhile. Every change of its requests runs it at once.
  int control_interval_ms = 20;
  bool refuse_overload = false; // on_overload: refuse (shed what cannot finish in time) | queue
  bool reject_on_miss = false;  // on_miss: reject (refuse at once what cannot meet its deadline) | serve
  std::string profile_path;    // a `dilaserve profile` file; empty: `up` measures one
  std::string profile_text;
  std::string quality_path;    // a quality curve (docs/policies.md); empty: tau control has no curve
  std::string quality_text;
};

/// When TP groups split and merge (docs/config.md, "reconfigure"): on command only
/// (`manual`), or also when the reconfigurer's periodic call to the optimizer says so.
struct reconfigure_settings {
  bool automatic = false;
  int interval_ms = 1000;     // how often the reconfigurer reads the load
  int min_dwell_ms = 10000;   // a regrouped node keeps its layout at least this long
  int window_ms = 5000;       // arrivals the forecast's rate looks at
  // A regrouped node serves nothing for about this long (drain and re-initialisation); the
  // optimizer switches only when the gain over min_dwell_ms repays it (policy::switch_pays).
  int regroup_ms = 2000;
  // The optimizer's group model (policies/reconfig.hpp): the share of arrivals a plan must
  // predict on time, the utilisation no group is planned beyond (also the margin by which a
  // burst layout must keep up with the sustained rate), and the resolution of its capacity
  // search (units of the largest reachable capacity).
  double attainment_target = 0.9;  // fraction
  double utilization_max = 0.9;    // fraction
  int capacity_units = 2000;
  // The forecast the optimizer plans for (policy::forecast_from_arrivals): the arrival rate is
  // this quantile of the rates over pieces of the window about this long, so that a burst
  // counts as a burst and not as the window's mean.
  int forecast_subwindow_ms = 500;  // ms
  double forecast_quantile = 0.9;   // fraction
  // Nodes that drain for a regroup at once, as a fraction of the cluster's nodes (at least
  // one): capacity drops by at most that much while they drain (policy::nodes_at_once).
  double max_fraction = 0.25;       // fraction
};

/// `migration:`: how the migration planner runs, live (actors/migrator.cpp) and simulated.
struct migration_settings {
  int interval_ms = 100;    // how often the planner looks at the groups (a look costs one
                            // report per group and answers within one step of each)
  int max_moves = 16;       // moves per look, which bounds a burst of transfers
  double imbalance = 1.5;   // `migration` (balance) moves when the busiest group holds this many
                            // times (+1) the requests of the idlest
};

// The keys each section shares; a file passes these plus its own to the parsers below.
const std::set<std::string>& node_keys();         // name, devices, groups
const std::set<std::string>& engine_keys();       // block_length, threshold, max_batch, cache, refresh_interval
const std::set<std::string>& scheduler_keys();    // token_budget, max_active, tau_*, ...
const std::set<std::string>& reconfigure_keys();  // interval_ms, min_dwell_ms, window_ms, regroup_ms, max_fraction, ...

/// `nodes:`, a non-empty list with unique names. `whole`: every node's groups use all its
/// devices (the simulator's reconfiguration partitions whole nodes).
std::vector<node_config> parse_nodes(const yaml_checker& c, const YAML::Node& n, const std::set<std::string>& keys,
                                     bool whole);

engine_defaults parse_engine(const yaml_checker& c, const YAML::Node& n, const std::set<std::string>& keys);

/// `scheduler: NAME` or a map; `tau_ref` is the engine's threshold (tau_min may not exceed it).
scheduler_settings parse_scheduler(const yaml_checker& c, const YAML::Node& n, const std::set<std::string>& keys,
                                   const std::string& base_dir, double tau_ref);

/// Reads a step-cost profile for `s` (path and text), checked by the policies' loader; throws
/// config_error naming the file and the problem.
void set_profile(scheduler_settings& s, const std::string& path);

/// `reconfigure: manual | auto` or a map.
reconfigure_settings parse_reconfigure(const yaml_checker& c, const YAML::Node& n, const std::set<std::string>& keys);

/// `migration: {interval_ms, max_moves, imbalance}`, the same section for both.
migration_settings parse_migration(const yaml_checker& c, const YAML::Node& n);

}  // namespace dls::config
