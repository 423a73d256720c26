#include "sim/cluster.hpp"

#include "config/cluster_schema.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace dls::sim {

double sim_cluster::contention_model::factor(double busy) const {
  if (slowdown.empty()) return 1.0;
  if (busy <= slowdown.front().busy) return slowdown.front().factor;
  for (std::size_t i = 1; i < slowdown.size(); ++i)
    if (busy <= slowdown[i].busy) {
      const auto& a = slowdown[i - 1];
      const auto& b = slowdown[i];
      return a.factor + (b.factor - a.factor) * (busy - a.busy) / (b.busy - a.busy);
    }
  return slowdown.back().factor;
}

int sim_cluster::devices() const { return std::accumulate(node_devices.begin(), node_devices.end(), 0); }

int sim_cluster::groups_initial() const {
  int n = 0;
  for (const auto& p : initial_layout) n += static_cast<int>(p.size());
  return n;
}

namespace {

using config::yaml_checker;

// The shared sections' keys plus what only the simulator models (docs/simulator.md).
const std::set<std::string> sim_node_keys = config::keys_of({config::node_keys(), {"replicas"}});
const std::set<std::string> sim_scheduler_keys =
    config::keys_of({config::scheduler_keys(),
                     {"refresh_split", "refresh_split_growth", "refresh_join_growth", "missed_renewal", "admission_control",
                      "oldest_missed_first", "missed_grace", "slack_budget", "drop_wait_factor"}});
const std::set<std::string> sim_reconfigure_keys =
    config::keys_of({config::reconfigure_keys(),
                     {"boot_from_forecast"}});

double seconds(int ms) { return ms / 1e3; }

// A sim-only number, when present.
void read_real(const yaml_checker& c, const YAML::Node& n, const char* key, const std::string& ctx, double lo,
               double hi, double& out) {
  if (n && n[key]) out = c.real(n[key], ctx + "." + key, lo, hi);
}

void read_int(const yaml_checker& c, const YAML::Node& n, const char* key, const std::string& ctx, long long lo,
              long long hi, int& out) {
  if (n && n[key]) out = static_cast<int>(c.integer(n[key], ctx + "." + key, lo, hi));
}

void read_bool(const yaml_checker& c, const YAML::Node& n, const char* key, const std::string& ctx, bool& out) {
  if (n && n[key]) out = c.boolean(n[key], ctx + "." + key);
}

void parse_scheduler_extras(const yaml_checker& c, const YAML::Node& s, sim_cluster& out) {
  const std::string ctx = "scheduler";
  read_int(c, s, "refresh_split", ctx, 0, 1 << 16, out.refresh_split);
  read_real(c, s, "refresh_split_growth", ctx, 0, 1e6, out.refresh_split_growth);
  read_real(c, s, "refresh_join_growth", ctx, 0, 1e6, out.refresh_join_growth);
  read_real(c, s, "missed_renewal", ctx, 0, 1e6, out.missed_renewal);
  read_real(c, s, "missed_grace", ctx, 0, 1e6, out.missed_grace);
  read_bool(c, s, "admission_control", ctx, out.admission_control);
  read_bool(c, s, "oldest_missed_first", ctx, out.oldest_missed_first);
  read_bool(c, s, "slack_budget", ctx, out.slack_budget);
  read_real(c, s, "drop_wait_factor", ctx, 0, 1e6, out.drop_wait_factor);
}

void parse_co_run(const yaml_checker& c, const YAML::Node& cr, sim_cluster& out) {
  c.check_keys(cr, {"model", "sm_saturation", "max_reuse_share", "tax"}, "co_run");
  if (cr["model"]) {
    try {
      out.co_run.model = policy::parse_co_run_model(c.str(cr["model"], "co_run.model"));
    } catch (const std::exception& e) {
      c.fail(cr["model"], std::string("co_run.model: ") + e.what());
    }
  }
  read_real(c, cr, "sm_saturation", "co_run", 1e-9, 1, out.co_run.sm_saturation);
  read_real(c, cr, "max_reuse_share", "co_run", 1e-9, 1 - 1e-9, out.co_run.max_reuse_share);
  read_real(c, cr, "tax", "co_run", 0, 1 - 1e-9, out.co_run.tax);
  if (out.co_run.model != policy::co_run_model::off && out.refresh_split > 0)
    c.fail(cr, "co_run runs whole refreshes; set scheduler.refresh_split to 0");
  const bool roofline = out.cost.kind() == policy::step_cost_model::form::roofline;
  if (!roofline && (out.co_run.model == policy::co_run_model::fluid || out.co_run.model == policy::co_run_model::partition))
    c.fail(cr, std::string("co_run model '") + policy::co_run_model_name(out.co_run.model) +
                   "' needs a roofline profile (use 'tax' with a measured one)");
}

void parse_reconfigure_extras(const yaml_checker& c, const YAML::Node& r, sim_cluster& out) {
  const std::string ctx = "reconfigure";
  read_bool(c, r, "boot_from_forecast", ctx, out.boot_from_forecast);
}

}  // namespace

sim_cluster parse_cluster(const std::string& text, const std::string& base_dir, const std::string& file_label) {
  const yaml_checker c(file_label);
  const YAML::Node root = c.load(text);
  c.check_keys(root, {"name", "nodes", "engine", "max_canvas", "scheduler", "reconfigure", "co_run", "links",
                      "control_plane", "migration"},
               "the top level");
  sim_cluster out;
  out.name = c.str(c.require(root, "name", "the top level"), "name");

  // The running cluster's engine defaults: the simulator models the block, the reference tau
  // and the batch of a step.
  const auto engine = root["engine"] ? config::parse_engine(c, root["engine"], config::engine_keys())
                                     : config::engine_defaults{};
  out.block_len = engine.decode.block_length;
  out.ref_tau = engine.decode.threshold;
  out.max_batch = engine.max_batch;
  // What a running cluster reads from the model's config.json.
  if (root["max_canvas"]) out.max_canvas = static_cast<int>(c.integer(root["max_canvas"], "max_canvas", 1, 1 << 24));

  const auto sched = c.require(root, "scheduler", "the top level");
  const auto s = config::parse_scheduler(c, sched, sim_scheduler_keys, base_dir, out.ref_tau);
  if (s.profile_path.empty()) c.fail(sched, "scheduler.profile is required: the step costs the simulator runs on");
  if (s.quality_path.empty()) c.fail(sched, "scheduler.quality is required: the curve tau control decides with");
  out.profile_path = s.profile_path;
  out.quality_path = s.quality_path;
  out.cost = policy::parse_step_cost_profile(s.profile_text);
  out.quality = policy::parse_quality_curve(s.quality_text);
  out.quality.set_refresh_interval(engine.decode.refresh_period());
  out.token_budget = s.token_budget;
  out.max_active = s.max_active;
  out.reject_on_miss = s.reject_on_miss;
  out.threshold.tau_min = s.tau_min;
  out.threshold.tau_max = out.ref_tau;
  out.threshold.tau_step = s.tau_step;
  out.threshold.accuracy_budget = s.accuracy_budget;
  out.cap_forecast_s = seconds(s.cap_forecast_ms);
  out.cap_forecast_refresh_s = seconds(s.cap_forecast_refresh_ms);
  out.control_interval_s = seconds(s.control_interval_ms);
  out.slo_request_overhead_s = std::max(0.0, s.slo_request_overhead_ms) / 1e3;
  if (s.refuse_overload) c.fail(sched["on_overload"], "scheduler.on_overload: refuse is not modelled by the simulator");
  parse_scheduler_extras(c, sched, out);

  const auto nodes = config::parse_nodes(c, c.require(root, "nodes", "the top level"), sim_node_keys, /*whole*/ true);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
    for (int tp : n.groups)
      if (!out.cost.supports(tp))
        c.fail(root["nodes"][i]["groups"], "node '" + n.name + "' uses TP " + std::to_string(tp) +
                                               ", which the profile does not cover");
    auto layout = n.groups;
    std::sort(layout.begin(), layout.end(), std::greater<int>());
    for (int k = 0; k < n.replicas; ++k) {
      out.node_devices.push_back(n.devices.slots());
      out.initial_layout.push_back(layout);
    }
  }

  if (const auto cr = root["co_run"]) parse_co_run(c, cr, out);

  if (const auto l = root["links"]) {
    c.check_keys(l, {"intra_node_bytes_per_s", "inter_node_bytes_per_s", "latency_s"}, "links");
    read_real(c, l, "intra_node_bytes_per_s", "links", 1, 1e15, out.link.intra_node_bytes_per_s);
    read_real(c, l, "inter_node_bytes_per_s", "links", 1, 1e15, out.link.inter_node_bytes_per_s);
    read_real(c, l, "latency_s", "links", 0, 10, out.link.latency_s);
  }
  out.link.kv_bytes_per_token =
      out.cost.memory.kv_bytes_per_token > 0 ? out.cost.memory.kv_bytes_per_token : out.link.kv_bytes_per_token;


  if (const auto cp = root["control_plane"]) {
    c.check_keys(cp, {"request_ms", "cpu_ms", "cores", "step_ms", "slo_step_ms", "group_ms", "contention"},
                 "control_plane");
    auto& m = out.control_plane;
    // Measured figures are fractions of a millisecond, so these take reals.
    auto ms = [&](const char* key, double& out_s) {
      double v = out_s * 1e3;
      read_real(c, cp, key, "control_plane", 0, 60000, v);
      out_s = v / 1e3;
    };
    ms("request_ms", m.request_s);
    ms("cpu_ms", m.cpu_s);
    read_int(c, cp, "cores", "control_plane", 1, 1 << 16, m.cores);
    ms("step_ms", m.step_s);
    ms("group_ms", m.group_s);
    if (cp["slo_step_ms"]) {
      m.slo_step_s = 0;
      ms("slo_step_ms", m.slo_step_s);
    }
    const auto profile_only = out.cost;
    if (m.step_s > 0)
      for (int tp : out.cost.tp_degrees()) out.cost = policy::with_step_overhead(out.cost, tp, m.step_s);
    if (m.slo_step_s >= 0) {
      auto slo = profile_only;
      for (int tp : slo.tp_degrees()) slo = policy::with_step_overhead(slo, tp, m.slo_step_s);
      out.slo_cost = std::move(slo);
    }
    if (const auto ct = cp["contention"]) {
      const std::string ctx = "control_plane.contention";
      c.check_keys(ct, {"window_ms", "slowdown"}, ctx);
      auto& k = m.contention;
      double w_ms = k.window_s * 1e3;
      read_real(c, ct, "window_ms", ctx, 1e-3, 3.6e6, w_ms);
      k.window_s = w_ms / 1e3;
      const auto pts = c.require(ct, "slowdown", ctx);
      if (!pts.IsSequence() || pts.size() == 0) c.fail(pts, ctx + ".slowdown: a non-empty list of {busy, factor}");
      for (const auto& p : pts) {
        if (!p.IsMap()) c.fail(p, ctx + ".slowdown: each point is {busy, factor}");
        c.check_keys(p, {"busy", "factor"}, ctx + ".slowdown");
        sim_cluster::contention_model::point q;
        q.busy = c.real(c.require(p, "busy", ctx + ".slowdown"), ctx + ".slowdown.busy", 0, 1);
        q.factor = c.real(c.require(p, "factor", ctx + ".slowdown"), ctx + ".slowdown.factor", 1e-3, 1000);
        if (!k.slowdown.empty() && q.busy <= k.slowdown.back().busy)
          c.fail(p, ctx + ".slowdown: busy must increase from point to point");
        k.slowdown.push_back(q);
      }
      if (out.co_run.model != policy::co_run_model::off)
        c.fail(ct, ctx + " models one engine stream; it cannot be combined with co_run");
    }
  }

  const auto r = root["reconfigure"] ? config::parse_reconfigure(c, root["reconfigure"], sim_reconfigure_keys)
                                     : config::reconfigure_settings{};
  out.reconfig_interval_s = seconds(r.interval_ms);
  out.forecast_window_s = seconds(r.window_ms);
  out.regroup_cost_s = seconds(r.regroup_ms);
  out.min_dwell_s = seconds(r.min_dwell_ms);
  out.reconfig.attainment_target = r.attainment_target;
  out.reconfig.utilization_max = r.utilization_max;
  out.reconfig.capacity_units = r.capacity_units;
  out.forecast_subwindow_s = seconds(r.forecast_subwindow_ms);
  out.forecast_quantile = r.forecast_quantile;
  out.max_reconfig_fraction = r.max_fraction;
  if (root["reconfigure"]) parse_reconfigure_extras(c, root["reconfigure"], out);
  out.reconfig.ref_tau = out.ref_tau;
  out.reconfig.max_batch = out.max_batch;
  out.reconfig.token_budget = out.token_budget;
  out.reconfig.tau_levels = policy::planning_tau_levels(out.threshold, out.quality);

  if (const auto m = root["migration"]) {  // the running cluster's section, the same parser
    const auto ms = config::parse_migration(c, m);
    out.migration_interval_s = seconds(ms.interval_ms);
    out.migration.max_moves = ms.max_moves;
    out.migration.imbalance = ms.imbalance;
  }
  out.migration.token_budget = out.token_budget;
  out.migration.max_active = out.max_active;
  return out;
}

sim_cluster load_cluster(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open cluster file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto slash = path.find_last_of('/');
  return parse_cluster(ss.str(), slash == std::string::npos ? std::string(".") : path.substr(0, slash), path);
}

}  // namespace dls::sim
