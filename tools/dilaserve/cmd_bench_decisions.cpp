// `dilaserve bench-decisions`: times policy::decide_step on decisions a live group recorded
// (DILASERVE_DECISION_LOG, actors/decision_record.hpp), with the policy context a node builds
// from the same cluster file: the decision's own cost, apart from the live machine's noise.
#include "actors/decision_record.hpp"
#include "actors/policy_view.hpp"
#include "dilaserve/command_registry.hpp"
#include "dilaserve/median.hpp"
#include "dilaserve/validators.hpp"
#include "policies/group_step.hpp"
#include "policies/presets.hpp"
#include "runtime/cluster_config.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace act = dls::actors;
namespace pol = dls::policy;
using clock_type = std::chrono::steady_clock;

struct decisions_options {
  std::string cluster;
  std::string log;
  std::string profile;
  int reps = 50;
  bool json = false;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct timed_record {
  double median_s = 0;
  std::size_t active = 0, queued = 0;
  bool controlled = false;
};

int run_decisions(const decisions_options& o) {
  auto cfg = dls::runtime::load_cluster_config(o.cluster);
  if (!o.profile.empty()) cfg.scheduler.profile_text = read_file(o.profile);
  const auto ctx = act::make_policy_context(cfg.scheduler, cfg.engine);
  if (!ctx->cost)
    std::fprintf(stderr, "bench-decisions: no step-cost profile (--profile STATE/profile.yaml): the groups decided "
                         "with order and token budget alone\n");
  std::ifstream in(o.log);
  if (!in) throw std::runtime_error(o.log + ": cannot open");
  std::vector<timed_record> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    act::decision_record rec;
    try {
      rec = act::decision_record_from_json(line);
    } catch (const std::exception& e) {
      throw std::runtime_error(o.log + ":" + std::to_string(n) + ": " + e.what());
    }
    pol::group_policy policy;
    try {
      policy = pol::make_group_policy(pol::make_policy_set(rec.policy), ctx->knobs);
    } catch (const std::exception& e) {
      throw std::runtime_error(o.log + ":" + std::to_string(n) + ": " + e.what());
    }
    std::optional<pol::step_cost_model> cost;
    if (ctx->cost && ctx->cost->supports(rec.snapshot.group.tp))
      cost = pol::with_step_overhead(*ctx->cost, rec.snapshot.group.tp, rec.step_overhead_s);
    // The group's forecast as it stands: its demand is computed once, as the group recomputes
    // it only every cap_forecast_refresh_ms, outside the timing.
    pol::load_forecast load;
    load.cfg.window_s = ctx->knobs.cap_forecast_s;
    load.refresh_s = ctx->knobs.cap_forecast_refresh_s;
    for (const auto& a : rec.arrivals) load.record(a);
    auto decide = [&](bool time_it) {
      auto snap = rec.snapshot;
      auto ledger = rec.ledger;
      snap.ledger = &ledger;
      snap.load = &load;
      const auto t0 = clock_type::now();
      const auto d = pol::decide_step(snap, policy, cost ? &*cost : nullptr, ctx->quality);
      const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
      return std::make_pair(time_it ? s : 0.0, d.controlled);
    };
    const bool controlled = decide(false).second;
    std::vector<double> times;
    times.reserve(static_cast<std::size_t>(o.reps));
    for (int r = 0; r < o.reps; ++r) times.push_back(decide(true).first);
    out.push_back({dls::cli::median(times), rec.snapshot.active.size(), rec.snapshot.queued.size(), controlled});
  }
  if (out.empty()) throw std::runtime_error(o.log + ": no decision records");
  std::vector<double> medians;
  double active = 0, queued = 0, controlled = 0, sum = 0;
  for (const auto& t : out) {
    medians.push_back(t.median_s);
    sum += t.median_s;
    active += static_cast<double>(t.active);
    queued += static_cast<double>(t.queued);
    controlled += t.controlled;
  }
  const double n = static_cast<double>(out.size());
  std::sort(medians.begin(), medians.end());
  const double p90 = medians[std::min(medians.size() - 1, static_cast<std::size_t>(0.9 * n))];
  if (o.json) {
    nlohmann::json j{{"records", out.size()},     {"reps", o.reps},
                     {"mean_active", active / n}, {"mean_queued", queued / n},
                     {"controlled", controlled / n}, {"median_us", 1e6 * dls::cli::median(medians)},
                     {"mean_us", 1e6 * sum / n}, {"p90_us", 1e6 * p90},
                     {"max_us", 1e6 * medians.back()}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%zu decisions (mean %.1f active, %.1f queued; %.0f %% with tau control), each the median of %d runs\n",
              out.size(), active / n, queued / n, 100 * controlled / n, o.reps);
  std::printf("decide_step: median %.2f us, mean %.2f us, p90 %.2f us, max %.2f us\n", 1e6 * dls::cli::median(medians),
              1e6 * sum / n, 1e6 * p90, 1e6 * medians.back());
  return 0;
}

dls::cli::register_command reg{"bench-decisions", [](CLI::App& app) {
  auto* sub = app.add_subcommand("bench-decisions",
                                 "Time the step decision on decisions a live group recorded (DILASERVE_DECISION_LOG)");
  auto o = std::make_shared<decisions_options>();
  sub->add_option("--cluster", o->cluster, "The cluster file the groups ran with (knobs, quality curve, profile)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--log", o->log, "A group's decision log (DIR/<group>.jsonl)")->required()->check(CLI::ExistingFile);
  sub->add_option("--profile", o->profile, "The step-cost profile the groups used when the file names none "
                                           "(STATE/profile.yaml)")
      ->check(CLI::ExistingFile);
  sub->add_option("--reps", o->reps, "Runs of each decision to take the median of")->check(dls::cli::positive);
  sub->add_flag("--json", o->json, "One JSON object instead of the table");
  return std::function<int()>([o] { return run_decisions(*o); });
}};

}  // namespace
