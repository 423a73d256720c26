// `dilaserve sim-bound`: the upper bound on SLO attainment that any policy can reach on a
// simulated workload (tools/sim/bound.hpp, policies/bound.hpp), for the same requests, loads and
// SLO scales as `dilaserve sim`, beside the relaxation's own EDF schedule.
#include "dilaserve/command_registry.hpp"
#include "dilaserve/validators.hpp"
#include "sim/bound.hpp"
#include "sim/suite.hpp"
#include "sim/trace.hpp"
#include "sim/workload.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace {

struct bound_options {
  std::string cluster;
  std::string trace;
  std::string workload;
  std::uint64_t seed = 1;
  std::size_t requests = 0;
  double rate = 0;
  std::vector<double> loads{1.0};
  std::vector<double> slo_scales{2.0};
  double max_window = 0;
};

namespace ds = dls::sim;

void print_bounds(const ds::sim_cluster& cluster, const std::vector<double>& loads, const std::vector<double>& slo_scales,
                  double max_window, const std::function<std::vector<ds::sim_request>(double)>& requests_at) {
  std::printf("%6s %6s %10s %14s %14s %12s %8s\n", "load", "slo", "requests", "upper_bound_%", "relaxed_edf_%",
              "work_ms/req", "wall_s");
  for (double load : loads) {
    const auto reqs = requests_at(load);
    for (double s : slo_scales) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto b = ds::slo_attainment_bound(cluster, reqs, s, max_window);
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%6.2f %6.2f %10zu %14.2f %14.2f %12.3f %8.2f\n", load, s, b.requests, 100 * b.upper,
                  100 * b.relaxed, 1e3 * b.mean_work_s, wall);
    }
  }
}

// The suite's workload file: every arrival variant, its requests drawn and scaled exactly as
// `dilaserve sim-suite` draws and scales them.
int run_workload_bound(const bound_options& o, const ds::sim_cluster& cluster) {
  auto w = ds::load_workload(o.workload);
  if (o.requests) w.requests = o.requests;
  for (const auto& a : w.arrivals) {
    const auto rows = ds::workload_rows(w, a, o.seed);
    std::printf("workload %s/%s: %zu requests on %s (%d devices); tau range [%.2f, %.2f]\n", w.name.c_str(),
                a.label().c_str(), rows.size(), cluster.name.c_str(), cluster.devices(), cluster.threshold.tau_min,
                cluster.threshold.tau_max);
    print_bounds(cluster, o.loads, o.slo_scales, o.max_window,
                 [&](double load) { return ds::suite_requests(cluster, rows, load, false); });
  }
  return 0;
}

int run_bound(const bound_options& o) {
  const auto cluster = ds::load_cluster(o.cluster);
  if (!o.workload.empty()) return run_workload_bound(o, cluster);
  auto rows = ds::load_azure_csv(o.trace);
  if (o.requests) rows = ds::resize_trace(rows, o.requests);
  std::vector<ds::canvas_shape> shapes;
  for (const auto& r : rows) shapes.push_back(ds::to_canvas(r, cluster.block_len, cluster.max_canvas));
  // The same scaling as `dilaserve sim`: load 1.0 = --rate, or the initial layout's capacity at tau_ref.
  const double capacity = ds::cluster_capacity_rps(cluster, ds::length_mix(shapes, 16, cluster.block_len));
  const double base_rate = o.rate > 0 ? o.rate : capacity;
  const double raw_rate = ds::trace_rate(rows);
  std::printf("cluster %s: %d devices, capacity %.2f req/s, base rate %.2f req/s (%s); %zu requests; "
              "tau range [%.2f, %.2f]; way in %.3f ms\n",
              cluster.name.c_str(), cluster.devices(), capacity, base_rate, o.rate > 0 ? "--rate" : "load 1.0 = capacity",
              rows.size(), cluster.threshold.tau_min, cluster.threshold.tau_max,
              1e3 * (cluster.control_plane.cpu_s + cluster.control_plane.request_s));
  print_bounds(cluster, o.loads, o.slo_scales, o.max_window, [&](double load) {
    const double factor = raw_rate / (load * base_rate);
    std::vector<ds::sim_request> reqs;
    for (std::size_t i = 0; i < rows.size(); ++i)
      reqs.push_back({rows[i].t * factor, shapes[i].prompt_len, shapes[i].gen_len, shapes[i].answer_blocks});
    return reqs;
  });
  return 0;
}

dls::cli::register_command reg{"sim-bound", [](CLI::App& app) {
  auto* sub = app.add_subcommand("sim-bound", "upper bound on SLO attainment any policy can reach on a workload");
  auto o = std::make_shared<bound_options>();
  sub->add_option("--cluster", o->cluster, "simulated cluster YAML (configs/sim/*.yaml)")->required();
  auto* trace = sub->add_option("--trace", o->trace, "Azure LLM trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens)");
  auto* workload = sub->add_option("--workload", o->workload,
                                   "a suite workload (configs/sim/workloads/*.yaml): every arrival variant, drawn "
                                   "and scaled as `dilaserve sim-suite` does");
  trace->excludes(workload);
  workload->excludes(trace);
  sub->add_option("--seed", o->seed, "seed of a --workload's draws (sim-suite's default is 1)");
  sub->add_option("--requests", o->requests, "number of requests (repeated or cut to N)")
      ->check(dls::cli::sim_requests);
  auto* rate = sub->add_option("--rate", o->rate, "base arrival rate (req/s) that --load multiplies, as for `dilaserve sim`; "
                                     "default: the cluster's capacity at tau 0.9")
      ->check(dls::cli::positive);
  rate->excludes(workload);  // a workload is scaled to the capacity for its own mix, as sim-suite does
  sub->add_option("--load", o->loads, "load multipliers, as for `dilaserve sim`")
      ->delimiter(',')
      ->check(CLI::Range(0.001, 1000.0));
  sub->add_option("--slo-scale", o->slo_scales, "SLO scales S")->delimiter(',')->check(CLI::Range(0.001, 1000.0));
  sub->add_option("--max-window", o->max_window, "longest window (seconds) the bound considers; 0: no limit")
      ->check(dls::cli::non_negative);
  return std::function<int()>([o] {
    if (o->trace.empty() == o->workload.empty()) throw CLI::ValidationError("sim-bound: give --trace FILE or --workload FILE");
    return run_bound(*o);
  });
}};

}  // namespace
