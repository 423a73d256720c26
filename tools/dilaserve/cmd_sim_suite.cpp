// `dilaserve sim-suite`: the workload suite (configs/sim/workloads/) on one simulated cluster,
// every workload at every load under each policy, one table (docs/simulator.md).
#include "dilaserve/command_registry.hpp"
#include "dilaserve/progress.hpp"
#include "dilaserve/validators.hpp"
#include "sim/suite.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

namespace {

struct suite_options {
  std::string cluster;
  std::string suite = "configs/sim/workloads";
  std::vector<std::string> only;
  dls::sim::suite_config cfg;
  bool json = false;
  bool parts = false;
  std::string out;
  std::vector<std::string> sweep;          // cluster-file keys (dotted paths) to scale
  std::vector<double> factors{0.5, 1.5};   // each key is run at its value times each factor
};

// The cluster file's text with the number at dotted `key` multiplied by `factor` (an integer
// stays an integer, at least 1). Refuses a key the file does not set to a number: the sweep
// varies what the file states, so a default must be written there first.
std::string scaled_cluster(const std::string& text, const std::string& file, const std::string& key, double factor,
                           double& value) {
  YAML::Node root = YAML::Load(text);
  std::vector<YAML::Node> path{root};
  std::size_t from = 0;
  while (true) {
    const auto dot = key.find('.', from);
    const auto part = key.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
    const YAML::Node parent = path.back();
    if (part.empty() || !parent.IsMap() || !parent[part])
      throw std::invalid_argument("--sweep: " + file + " sets no '" + key + "' (write the value there first)");
    path.push_back(parent[part]);
    if (dot == std::string::npos) break;
    from = dot + 1;
  }
  YAML::Node leaf = path.back();
  double v = 0;
  if (!leaf.IsScalar() || !YAML::convert<double>::decode(leaf, v) || leaf.Scalar() == "true" || leaf.Scalar() == "false")
    throw std::invalid_argument("--sweep: '" + key + "' in " + file + " is not a number");
  const auto& raw = leaf.Scalar();
  const bool integer = raw.find_first_of(".eE") == std::string::npos;
  value = integer ? std::max(1.0, std::round(v * factor)) : v * factor;
  char buf[64];
  if (integer)
    std::snprintf(buf, sizeof buf, "%.0f", value);
  else
    std::snprintf(buf, sizeof buf, "%.17g", value);
  leaf = std::string(buf);
  YAML::Emitter e;
  e << root;
  return e.c_str();
}

std::vector<dls::sim::workload_spec> chosen_suite(const suite_options& o) {
  namespace ds = dls::sim;
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
  return suite;
}

int run_suite_cmd(const suite_options& o) {
  namespace ds = dls::sim;
  const auto cluster = ds::load_cluster(o.cluster);
  const auto suite = chosen_suite(o);
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
  // --out: every request of every run, with its shape and deadline, for per-request analysis.
  std::ofstream per_request;
  if (!o.out.empty()) {
    std::filesystem::create_directories(o.out);
    per_request.open(o.out + "/requests.csv");
    if (!per_request) throw std::runtime_error("cannot write " + o.out + "/requests.csv");
    per_request << "workload,on_miss,policy,load,slo_scale,index,arrival_s,prompt_len,gen_len,slo_window_s,latency_s,"
                   "queued_s,in_steps_s,alone_s,steps,slo_met,rejected\n";
    per_request.precision(10);
    cfg.each_run = [&](const ds::result_row& row, const std::vector<ds::sim_request>& reqs, const ds::run_result& res) {
      for (std::size_t i = 0; i < reqs.size(); ++i) {
        const auto& q = res.requests[i];
        const double latency = q.finish_s >= 0 ? q.finish_s - q.arrival_s : -1.0;
        per_request << row.workload << ',' << row.on_miss << ',' << row.policy << ',' << row.load << ','
                    << row.slo_scale << ',' << i << ',' << q.arrival_s << ',' << reqs[i].prompt_len << ','
                    << reqs[i].gen_len << ',' << q.deadline_s - q.arrival_s << ',' << latency << ',' << q.queued_s
                    << ',' << q.in_steps_s << ',' << q.alone_s << ',' << q.steps << ','
                    << (q.finish_s >= 0 && q.finish_s <= q.deadline_s + 1e-12 ? 1 : 0) << ',' << (q.rejected ? 1 : 0) << '\n';
      }
    };
  }
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
    if (!per_request) throw std::runtime_error("cannot write " + o.out + "/requests.csv");
    if (!o.json) std::printf("wrote %s/results.json and requests.csv\n", o.out.c_str());
  }
  return 0;
}

// --sweep: the suite once with the file as it is and once per (key, factor), each written to
// OUT/<key>@<factor>.json (the file as it is: OUT/base.json) for tools/sim/suite_summary.py.
int run_sweep_cmd(const suite_options& o) {
  namespace ds = dls::sim;
  if (o.out.empty()) throw std::invalid_argument("--sweep needs --out DIR for its result files");
  std::ifstream in(o.cluster);
  if (!in) throw std::invalid_argument("cannot read " + o.cluster);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const auto slash = o.cluster.find_last_of('/');
  const std::string base = slash == std::string::npos ? std::string(".") : o.cluster.substr(0, slash);
  const auto suite = chosen_suite(o);
  struct run { std::string name, text; };
  std::vector<run> runs{{"base", text}};
  for (const auto& key : o.sweep)
    for (double f : o.factors) {
      double v = 0;
      auto t = scaled_cluster(text, o.cluster, key, f, v);
      char name[160];
      std::snprintf(name, sizeof name, "%s@%g", key.c_str(), f);
      std::printf("%s: %s = %g\n", name, key.c_str(), v);
      runs.push_back({name, std::move(t)});
    }
  std::fflush(stdout);
  std::filesystem::create_directories(o.out);
  dls::cli::progress_bar bar("sim-suite --sweep", runs.size());
  for (const auto& r : runs) {
    auto cfg = o.cfg;
    const auto rows = ds::run_suite(ds::parse_cluster(r.text, base), suite, cfg);
    std::ofstream(o.out + "/" + r.name + ".json") << ds::results_json(rows).dump(2) << "\n";
    bar.advance(1, r.name);
  }
  bar.finish();
  std::printf("wrote %zu result files to %s; python3 tools/sim/suite_summary.py %s/*.json\n", runs.size(),
              o.out.c_str(), o.out.c_str());
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
      ->check(dls::cli::sim_requests);
  sub->add_option("--seed", o->cfg.seed, "seed for arrivals, lengths and commit draws");
  sub->add_flag("--json", o->json, "print {\"results\": [...]} only (the sim schema plus workload, on_miss, rejected)");
  sub->add_flag("--parts", o->parts, "also print where the mean latency goes (stderr with --json)");
  sub->add_option("--out", o->out,
                  "directory for results.json and requests.csv (every request of every run; with --sweep: one "
                  "results file per run)");
  sub->add_option("--sweep", o->sweep,
                  "cluster-file keys (dotted, e.g. scheduler.missed_grace) to scale by each --sweep-factors")
      ->delimiter(',');
  sub->add_option("--sweep-factors", o->factors, "factors for --sweep")->delimiter(',')->check(dls::cli::positive)
      ->capture_default_str();
  return std::function<int()>([o] { return o->sweep.empty() ? run_suite_cmd(*o) : run_sweep_cmd(*o); });
}};

}  // namespace
