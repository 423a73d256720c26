// `dilaserve sim`: replay a trace or a synthetic workload on a simulated cluster, for every
// (load, SLO scale, policy), and report attainment, latency and quality side by side.
#include "common/step_log.hpp"
#include "dilaserve/command_registry.hpp"
#include "dilaserve/validators.hpp"
#include "dilaserve/progress.hpp"
#include "policies/presets.hpp"
#include "sim/report.hpp"
#include "sim/simulator.hpp"
#include "sim/trace.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

namespace {

struct sim_options {
  std::string cluster;
  std::string trace;
  std::string synthetic;
  double burstiness = 1.0;
  double rate = 0.0;
  std::size_t requests = 0;
  std::vector<double> loads{1.0};
  std::vector<double> slo_scales{2.0};
  std::vector<std::string> policies{"static", "deadline", "migration", "dilaserve"};
  std::uint64_t seed = 1;
  bool json = false;
  bool stats = false;
  std::string out;
  std::string step_log;
};

std::string fmt(const char* f, double a) {
  char b[64];
  std::snprintf(b, sizeof b, f, a);
  return b;
}

int run_sim(const sim_options& o) {
  namespace ds = dls::sim;
  if (o.trace.empty() == o.synthetic.empty())
    throw std::invalid_argument("give exactly one of --trace or --synthetic");
  for (const auto& p : o.policies) (void)dls::policy::make_policy_set(p);  // fail early on typos
  const auto cluster = ds::load_cluster(o.cluster);

  std::vector<ds::trace_row> rows;
  const std::size_t n_default = 10000;
  if (!o.trace.empty()) {
    rows = ds::load_azure_csv(o.trace);
    if (o.requests) rows = ds::resize_trace(rows, o.requests);
  } else {
    ds::synthetic_spec spec;
    spec.kind = o.synthetic;
    spec.burstiness = o.burstiness;
    spec.rate = 1.0;  // rescaled below
    rows = ds::synthetic_trace(spec, o.requests ? o.requests : n_default, o.seed);
  }
  std::vector<ds::canvas_shape> shapes;
  shapes.reserve(rows.size());
  for (const auto& r : rows) shapes.push_back(ds::to_canvas(r, cluster.block_len, cluster.max_canvas));
  const auto mix = ds::length_mix(shapes, 16, cluster.block_len);
  const double capacity = ds::cluster_capacity_rps(cluster, mix);
  const double base_rate = o.rate > 0 ? o.rate : capacity;
  const double raw_rate = ds::trace_rate(rows);
  if (!o.json)
    std::printf("cluster %s: %d devices, %d groups, capacity %.2f req/s at tau %.2f; %zu requests, "
                "base rate %.2f req/s (%s)\n",
                cluster.name.c_str(), cluster.devices(), cluster.groups_initial(), capacity,
                cluster.ref_tau, rows.size(), base_rate,
                o.rate > 0 ? "--rate" : "load 1.0 = capacity");
  if (!o.json && cluster.co_run.model != dls::policy::co_run_model::off)
    std::printf("co-running: refresh and reuse steps side by side under the '%s' model (a what-if: the live "
                "engine runs one step stream per group; docs/policies.md)\n",
                dls::policy::co_run_model_name(cluster.co_run.model));

  const std::size_t runs = o.loads.size() * o.slo_scales.size() * o.policies.size();
  dls::cli::progress_bar bar("sim", runs * 1000);
  std::vector<ds::result_row> results;
  std::vector<ds::request_row> request_log;  // --out: every request of every run
  std::unique_ptr<dls::step_log> steps;      // --step-log
  if (!o.step_log.empty()) {
    const auto dir = std::filesystem::path(o.step_log).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir);
    std::filesystem::remove(o.step_log);
    steps = std::make_unique<dls::step_log>(o.step_log, 4096);
  }
  for (double load : o.loads) {
    // Arrival times scaled so the mean rate is load x base rate; the arrival pattern is kept.
    const double factor = raw_rate / (load * base_rate);
    std::vector<ds::sim_request> reqs;
    reqs.reserve(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i)
      reqs.push_back({rows[i].t * factor, shapes[i].prompt_len, shapes[i].gen_len, shapes[i].answer_blocks});
    for (double slo : o.slo_scales)
      for (const auto& pname : o.policies) {
        ds::run_config rc;
        rc.policy = dls::policy::make_policy_set(pname);
        rc.slo_scale = slo;
        rc.seed = o.seed;
        std::size_t shown = 0;
        const std::string detail = pname + " load " + fmt("%.2f", load);
        rc.progress = [&](double f) {
          const auto target = static_cast<std::size_t>(f * 1000);
          if (target > shown) {
            bar.advance(target - shown, detail);
            shown = target;
          }
        };
        if (steps) {
          const std::string run = pname + "@" + fmt("%g", load);
          rc.on_step = [&steps, run](const dls::step_record& r) {
            auto named = r;
            named.run = run;
            steps->append(named);
          };
        }
        auto res = ds::simulate(cluster, reqs, rc);
        results.push_back(ds::summarize(res, pname, load, slo));
        if (!o.out.empty()) {
          auto rows = ds::request_rows(res, pname, load, slo);
          request_log.insert(request_log.end(), rows.begin(), rows.end());
        }
      }
  }
  bar.finish();

  if (o.json) {
    std::cout << ds::results_json(results).dump(2) << "\n";
  } else {
    std::cout << ds::results_table(results);
  }
  if (o.stats || !o.json) {
    std::ostream& os = o.json ? std::cerr : std::cout;
    os << "\nrun statistics (wall clock; policy time per decision in microseconds)\n";
    char buf[320];
    std::snprintf(buf, sizeof buf, "%-14s %5s %10s %8s %10s %9s %9s %9s %9s %10s %10s\n", "policy", "load",
                  "events", "wall_s", "events/s", "step_us", "tau_us", "migr_us", "reconf_us",
                  "reconf_max_ms", "split_runs");
    os << buf;
    for (const auto& r : results) {
      const auto& s = r.stats;
      auto per = [](double t, std::uint64_t n) { return n ? 1e6 * t / static_cast<double>(n) : 0.0; };
      // A group that decides as a live one (policy::decide_step) controls tau inside its step
      // decision, so step_us includes it; only the simulator-only step paths time it apart.
      char tau[16] = "incl.";
      if (s.control_policy_s > 0) std::snprintf(tau, sizeof tau, "%.2f", per(s.control_policy_s, s.control_decisions));
      std::snprintf(buf, sizeof buf, "%-14s %5.2f %10llu %8.2f %10.0f %9.2f %9s %9.2f %9.1f %10.2f %10llu\n",
                    r.policy.c_str(), r.load, static_cast<unsigned long long>(s.events), s.wall_s,
                    s.wall_s > 0 ? static_cast<double>(s.events) / s.wall_s : 0.0,
                    per(s.batch_policy_s, s.batch_decisions), tau,
                    per(s.migration_policy_s, s.migration_decisions),
                    per(s.reconfig_policy_s, s.reconfig_decisions), 1e3 * s.reconfig_max_s,
                    static_cast<unsigned long long>(s.refresh_chunks));
      os << buf;
    }
    os << "\nwhere the mean latency goes (ms; docs/simulator.md): queued before admission, admitted but in no\n"
          "step, the request's own steps as long as they would be alone, and what sharing them added\n";
    std::snprintf(buf, sizeof buf, "%-14s %5s %9s %9s %9s %9s %9s\n", "policy", "load", "mean", "queued",
                  "left_out", "alone", "shared");
    os << buf;
    for (const auto& r : results) {
      const auto& p = r.parts;
      std::snprintf(buf, sizeof buf, "%-14s %5.2f %9.1f %9.1f %9.1f %9.1f %9.1f\n", r.policy.c_str(), r.load,
                    1e3 * r.mean_latency_s, 1e3 * p.queued_s, 1e3 * p.left_out_s, 1e3 * p.alone_s,
                    1e3 * p.shared_s);
      os << buf;
    }
  }
  if (!o.out.empty()) {
    std::filesystem::create_directories(o.out);
    ds::write_results_csv(o.out + "/results.csv", results);
    ds::write_requests_csv(o.out + "/requests.csv", request_log);
    std::ofstream(o.out + "/results.json") << ds::results_json(results).dump(2) << "\n";
    for (double slo : o.slo_scales) {
      std::ofstream svg(o.out + "/attainment_s" + fmt("%g", slo) + ".svg");
      svg << ds::attainment_svg(results, slo);
      std::ofstream(o.out + "/latency_s" + fmt("%g", slo) + ".svg") << ds::latency_svg(results, slo);
    }
    if (!o.json) std::printf("wrote %s/results.csv, requests.csv, results.json, attainment_s*.svg and latency_s*.svg\n", o.out.c_str());
  }
  return 0;
}

dls::cli::register_command reg{"sim", [](CLI::App& app) {
  auto* sub = app.add_subcommand("sim", "simulate policies on a GPU cluster under a virtual clock");
  auto o = std::make_shared<sim_options>();
  sub->add_option("--cluster", o->cluster, "simulated cluster YAML (configs/sim/*.yaml)")->required();
  auto* trace = sub->add_option("--trace", o->trace, "Azure LLM trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens)");
  auto* syn = sub->add_option("--synthetic", o->synthetic, "synthetic arrivals: poisson or gamma");
  trace->excludes(syn);
  sub->add_option("--burstiness", o->burstiness, "gamma: coefficient of variation of the gaps")
      ->check(dls::cli::positive);
  sub->add_option("--rate", o->rate, "base arrival rate (req/s) that --load multiplies; "
                                     "default: the cluster's capacity at tau 0.9")
      ->check(dls::cli::positive);
  sub->add_option("--requests", o->requests, "number of requests (trace: repeated or cut to N)")
      ->check(dls::cli::sim_requests);
  sub->add_option("--load", o->loads, "load multipliers (arrival rate / base rate)")
      ->delimiter(',')
      ->check(dls::cli::positive);
  sub->add_option("--slo-scale", o->slo_scales, "SLO scales S (deadline = arrival + S x isolated latency)")
      ->delimiter(',')
      ->check(dls::cli::positive);
  sub->add_option("--policies", o->policies, "policies: static, deadline, migration, dilaserve, "
                                             "tau-only, reconfig-only, migrate-only, deadline-tau, no-tau, "
                                             "no-reconfig, no-migrate, no-deadline, no-split, no-co-run")
      ->delimiter(',');
  sub->add_option("--seed", o->seed, "seed for synthetic arrivals and commit draws");
  sub->add_flag("--json", o->json, "print {\"results\": [...]} only");
  sub->add_flag("--stats", o->stats, "with --json: run statistics on stderr");
  sub->add_option("--out", o->out, "directory for results.csv, requests.csv (every request), results.json and attainment SVGs");
  sub->add_option("--step-log", o->step_log,
                  "write every step of every group as a CSV line to this file (the columns a live group writes with "
                  "DILASERVE_STEP_LOG; run = POLICY@LOAD)");
  return std::function<int()>([o] { return run_sim(*o); });
}};

}  // namespace
