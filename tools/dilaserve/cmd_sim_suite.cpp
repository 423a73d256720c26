// `dilaserve sim-suite`: the workload suite (configs/sim/workloads/) on one simulated cluster,
// every workload at every load under each policy, one table (docs/simulator.md).
#include "dilaserve/command_registry.hpp"
#include "dilaserve/progress.hpp"
#include "dilaserve/validators.hpp"
#include "sim/suite.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

namespace {

struct suite_options {
  std::string cluster;
  std::string suite = "configs/sim/workloads";
  std::vector<std::string> only;
  dls::sim::suite_config cfg;
  bool json = false;
  bool parts = false;
  std::string out;
};

int run_suite_cmd(const suite_options& o) {
  namespace ds = dls::sim;
  const auto cluster = ds::load_cluster(o.cluster);
  auto suite = ds::load_suite(o.suite);
  if (!o.only.empty()) {
    std::vector<ds::workload_spec> kept;
    for (const auto& name : o.only) {
      auto it = std::find_if(suite.begin(), suite.end(), [&](const ds::workload_spec& w) { return w.name == name; });
      if (it == suite.end()) throw std::invalid_argument("--workloads: no workload named '" + name + "' in " + o.suite);
      kept.push_back(*it);
    }
    suite = kept;
  }
  auto cfg = o.cfg;
  std::size_t variants = 0;
  for (const auto& w : suite) variants += w.arrivals.size();
  const std::size_t runs = variants * cfg.loads.size() * cfg.slo_scales.size() * cfg.on_miss.size() * cfg.policies.size();
  if (!o.json)
    std::printf("cluster %s: %d devices; suite %s: %zu workloads, %zu variants, %zu runs\n", cluster.name.c_str(),
                cluster.devices(), o.suite.c_str(), suite.size(), variants, runs);
  constexpr std::size_t ticks = 100;  // per run
  dls::cli::progress_bar bar("sim-suite", runs * ticks);
  std::size_t shown = 0;
  cfg.progress = [&](std::size_t done, std::size_t, double f, const std::string& what) {
    const auto target = done * ticks + static_cast<std::size_t>(f * ticks);
    if (target > shown) {
      bar.advance(target - shown, what);
      shown = target;
    }
  };
  const auto rows = ds::run_suite(cluster, suite, cfg);
  bar.finish();
  if (o.json)
    std::cout << ds::results_json(rows).dump(2) << "\n";
  else
    std::cout << ds::results_table(rows);
  if (o.parts) (o.json ? std::cerr : std::cout) << "\nwhere the mean latency goes (ms; docs/simulator.md)\n"
                                               << ds::latency_parts_table(rows);
  if (!o.out.empty()) {
    std::filesystem::create_directories(o.out);
    std::ofstream(o.out + "/results.json") << ds::results_json(rows).dump(2) << "\n";
    if (!o.json) std::printf("wrote %s/results.json\n", o.out.c_str());
  }
  return 0;
}

dls::cli::register_command reg{"sim-suite", [](CLI::App& app) {
  auto* sub = app.add_subcommand("sim-suite", "simulate the policies on every workload of a suite");
  auto o = std::make_shared<suite_options>();
  sub->add_option("--cluster", o->cluster, "simulated cluster YAML (configs/sim/*.yaml)")->required();
  sub->add_option("--suite", o->suite, "folder of workload YAML files")->capture_default_str();
  sub->add_option("--workloads", o->only, "run only these workloads (by name)")->delimiter(',');
  sub->add_option("--load", o->cfg.loads, "load multipliers (arrival rate / the cluster's capacity for the mix)")
      ->delimiter(',')
      ->check(dls::cli::positive);
  sub->add_option("--slo-scale", o->cfg.slo_scales, "SLO scales S")->delimiter(',')->check(dls::cli::positive);
  sub->add_option("--policies", o->cfg.policies, "policies (as for `dilaserve sim`)")->delimiter(',');
  sub->add_option("--on-miss", o->cfg.on_miss,
                  "workload (each file's on_miss), serve or reject; several run the suite once each")
      ->delimiter(',');
  sub->add_option("--requests", o->cfg.requests, "cut or repeat every workload to N requests")
      ->check(dls::cli::positive);
  sub->add_option("--seed", o->cfg.seed, "seed for arrivals, lengths and commit draws");
  sub->add_flag("--json", o->json, "print {\"results\": [...]} only (the sim schema plus workload, on_miss, rejected)");
  sub->add_flag("--parts", o->parts, "also print where the mean latency goes (stderr with --json)");
  sub->add_option("--out", o->out, "directory for results.json");
  return std::function<int()>([o] { return run_suite_cmd(*o); });
}};

}  // namespace
