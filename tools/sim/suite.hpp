#pragma once
// The workload suite: every (workload variant, load, SLO scale, on_miss, policy) combination
// simulated on one cluster, each workload's loads scaled to the cluster's capacity for its own
// length mix. `dilaserve sim-suite` prints the rows; docs/simulator.md, "Workload suite".
#include "sim/report.hpp"
#include "sim/workload.hpp"

#include <functional>
#include <string>
#include <vector>

namespace dls::sim {

struct suite_config {
  std::vector<double> loads{0.3, 0.5, 0.75, 1.0, 1.5, 2.0};
  std::vector<double> slo_scales{2.0};
  std::vector<std::string> policies{"static", "deadline", "dilaserve"};
  /// Each entry runs the whole grid once: "workload" (what the workload file says), "serve"
  /// or "reject" (on_miss for every request).
  std::vector<std::string> on_miss{"workload"};
  std::uint64_t seed = 1;
  std::size_t requests = 0;   // > 0: every workload cut or repeated to this many requests
  /// Called with (runs done, runs in all, fraction of the current run, what runs).
  std::function<void(std::size_t, std::size_t, double, const std::string&)> progress;
  /// Called after each run with its row (workload, on_miss, policy, load and SLO scale set), the
  /// requests it replayed and their outcomes (same order).
  std::function<void(const result_row&, const std::vector<sim_request>&, const run_result&)> each_run;
};

/// The requests of one variant at `load` x the cluster's capacity for its mix, sorted by
/// arrival; `reject` sets on_miss: reject on each.
std::vector<sim_request> suite_requests(const sim_cluster& c, const std::vector<trace_row>& rows,
                                        double load, bool reject);

/// Runs the suite. Rows carry `workload` = "<name>/<arrival label>" and `on_miss`.
std::vector<result_row> run_suite(const sim_cluster& c, const std::vector<workload_spec>& suite,
                                  const suite_config& cfg);

}  // namespace dls::sim
