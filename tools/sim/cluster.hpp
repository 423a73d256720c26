#pragma once
// A simulated GPU cluster: nodes and devices, the initial TP layout, the step-cost profile and
// quality curve, and the policy knobs. Loaded from configs/sim/*.yaml (docs/simulator.md).
#include "policies/co_run.hpp"
#include "policies/migration.hpp"
#include "policies/quality.hpp"
#include "policies/reconfig.hpp"
#include "policies/scheduler.hpp"
#include "policies/step_cost.hpp"
#include "policies/threshold.hpp"

#include <optional>
#include <string>
#include <vector>

namespace dls::sim {

struct sim_cluster {
  std::string name;
  std::string profile_path;
  std::string quality_path;
  policy::step_cost_model cost;
  // What a request's SLO derives from: the profile plus the per-step overhead of an idle group
  // (control_plane.slo_step_ms, else step_ms), as a live group fixes it when it starts.
  // Unset: `cost` (no control plane, or one without its own slo_step_ms).
  std::optional<policy::step_cost_model> slo_cost;
  const policy::step_cost_model& deadline_cost() const { return slo_cost ? *slo_cost : cost; }
  // scheduler.slo_request_overhead_ms: the path overhead per request a live head measures and
  // its deadlines count; the simulator cannot measure it, so absent (`measure`) counts none.
  double slo_request_overhead_s = 0;
  policy::quality_model quality;

  std::vector<int> node_devices;                 // devices per node
  std::vector<policy::partition> initial_layout;  // per node

  int block_len = 32;                            // engine.block_length
  int max_canvas = 4096;
  double ref_tau = 0.9;                          // engine.threshold: static tau and the SLO reference

  int token_budget = 8192;
  int max_batch = 256;
  int max_active = 64;                           // per group
  int refresh_split = 0;                         // layer ranges of a split refresh, 0: whole
  double refresh_split_growth = 0.02;            // a chunk lengthens a step by at most this
  double refresh_join_growth = 0.1;              // a second refresh lengthens a step by at most this
  double missed_renewal = 0.0;                   // a missed deadline is renewed by this x its SLO window
  bool admission_control = true;                 // least slack: EDF test before admitting (scheduler.hpp)
  bool oldest_missed_first = true;               // the oldest missed request leads every step
  double missed_grace = 1.0;                     // ... once past its deadline by this x its SLO window
  bool slack_budget = true;                      // least slack: a step may not outgrow the batch's slack
  bool reject_on_miss = false;                   // on_miss: reject for every request (cluster default)

  policy::link_params link;
  policy::threshold_config threshold;
  policy::reconfig_config reconfig;              // slo_scale is set per run
  policy::migration_config migration;            // mode is set per policy
  policy::co_run_config co_run;                  // refresh and reuse steps side by side; off by default

  // The serving path outside the groups (client to head to group and back, over CAF), which a
  // GPU cluster file leaves at zero; tools/sim_vs_live.sh measures it on a live cluster.
  // A request spends request_s outside any group before it reaches one (the whole path is put
  // before placement: its split between the way in and out is not measured), and first waits
  // for one of `cores` FIFO servers that each spend cpu_s of CPU on it: the path's throughput.
  // step_s is what every step takes beyond the profile: the messaging around the engine, and,
  // without `contention` below, the engine running slower than when it was profiled (a live
  // group measures the same difference and counts it in deadlines too).
  //
  // contention: the engine's steps on a machine whose cores it shares with the control plane,
  // as a CPU "device" does on tools/sim_vs_live.sh's 2-core machine (a GPU cluster file leaves
  // it off). The engine part of a step (the profile's time, not step_s) is multiplied by the
  // factor measured at the group's engine utilization over the last window_s (the fraction of
  // that window its steps ran): piecewise linear between the measured points (busy, factor),
  // the end points' factor beyond them. A factor is the live group's engine time over the
  // profile's prediction for the same steps at a constant arrival rate
  // (tools/sim_vs_live_calibrate.py): its waits for a core and its steps running slower after
  // the engine idled (docs/simulator.md, "Control plane").
  struct contention_model {
    struct point {
      double busy = 0;
      double factor = 1;
    };
    double window_s = 0.1;
    std::vector<point> slowdown;  // sorted by busy, distinct
    bool enabled() const { return !slowdown.empty(); }
    double factor(double busy) const;
  };
  struct control_plane_model {
    double request_s = 0;
    double cpu_s = 0;
    int cores = 1;
    double step_s = 0;
    double slo_step_s = -1;  // the per-step overhead deadlines count; < 0: step_s
    // group_s: the group's own time per request that reaches it (its actor handling the
    // request's messages), serial with its steps: the next step starts only after it.
    double group_s = 0;
    contention_model contention;
    bool modelled() const { return request_s > 0 || cpu_s > 0; }
  } control_plane;

  double control_interval_s = 0.02;    // scheduler.control_interval_ms: tau control per group at most this often
  double cap_forecast_s = 2.0;         // the tau cap's forecast: the group's arrivals this far back
  double cap_forecast_refresh_s = 0.5; // ... recomputed at most this often
  double migration_interval_s = 0.1;
  double reconfig_interval_s = 5.0;
  double forecast_window_s = 60.0;     // history the forecast looks at (>= min_dwell_s)
  bool boot_from_forecast = true;      // reconfiguring policies pick their boot layout
  double forecast_subwindow_s = 0.5;   // rate samples within the window
  double forecast_quantile = 0.9;      // forecast rate = this quantile of the samples
  double regroup_cost_s = 2.0;         // after drain: NCCL re-init and graph capture
  double max_reconfig_fraction = 0.25; // reconfigure.max_fraction: of nodes draining at once
  double min_dwell_s = 60.0;           // a regrouped node keeps its layout at least this long
  double drop_wait_factor = 0.0;       // drop a request still queued after F x its SLO; 0 = never

  int devices() const;
  int groups_initial() const;
};

/// Loads the cluster YAML; profile and quality paths are relative to the YAML's folder.
sim_cluster load_cluster(const std::string& path);
/// Parses cluster YAML text (the running cluster's shared sections, config/cluster_schema.hpp,
/// extended by what only the simulator models); relative paths resolve against `base_dir`;
/// `file_label` names the text in errors (config::config_error, one line with line and column).
sim_cluster parse_cluster(const std::string& text, const std::string& base_dir,
                          const std::string& file_label = "cluster");

}  // namespace dls::sim
