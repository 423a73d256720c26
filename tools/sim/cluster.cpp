#include "sim/cluster.hpp"

#include "common/layout.hpp"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace dls::sim {

int sim_cluster::devices() const { return std::accumulate(node_devices.begin(), node_devices.end(), 0); }

int sim_cluster::groups_initial() const {
  int n = 0;
  for (const auto& p : initial_layout) n += static_cast<int>(p.size());
  return n;
}

namespace {

std::string resolve(const std::string& base, const std::string& p) {
  if (p.empty() || p[0] == '/' || base.empty()) return p;
  return base + "/" + p;
}

template <class T>
void read(const YAML::Node& n, const char* key, T& out) {
  if (n && n[key]) out = n[key].as<T>();
}

}  // namespace

sim_cluster parse_cluster(const std::string& text, const std::string& base_dir) {
  YAML::Node root = YAML::Load(text);
  sim_cluster c;
  read(root, "name", c.name);
  if (!root["profile"] || !root["quality"])
    throw std::invalid_argument("cluster: 'profile' and 'quality' are required");
  c.profile_path = resolve(base_dir, root["profile"].as<std::string>());
  c.quality_path = resolve(base_dir, root["quality"].as<std::string>());
  c.cost = policy::load_step_cost_profile(c.profile_path);
  c.quality = policy::load_quality_curve(c.quality_path);

  const auto model = root["model"];
  read(model, "block_len", c.block_len);
  read(model, "max_canvas", c.max_canvas);
  read(model, "ref_tau", c.ref_tau);

  if (!root["nodes"] || !root["nodes"].IsSequence())
    throw std::invalid_argument("cluster: 'nodes' must be a list of {count, devices, layout}");
  for (const auto& n : root["nodes"]) {
    const int count = n["count"] ? n["count"].as<int>() : 1;
    const int devices = n["devices"].as<int>();
    policy::partition layout = n["layout"] ? n["layout"].as<std::vector<int>>() : policy::partition{1};
    if (auto why = common::layout_problem(devices, layout, /*whole*/ true); !why.empty())
      throw std::invalid_argument("cluster: a node's layout does not fit: " + why);
    for (int tp : layout)
      if (!c.cost.supports(tp))
        throw std::invalid_argument("cluster: layout uses TP " + std::to_string(tp) +
                                    ", which the profile does not cover");
    std::sort(layout.begin(), layout.end(), std::greater<int>());
    for (int i = 0; i < count; ++i) {
      c.node_devices.push_back(devices);
      c.initial_layout.push_back(layout);
    }
  }

  const auto s = root["scheduler"];
  read(s, "token_budget", c.token_budget);
  read(s, "max_batch", c.max_batch);
  read(s, "max_active", c.max_active);
  read(s, "refresh_split", c.refresh_split);
  read(s, "refresh_split_growth", c.refresh_split_growth);
  read(s, "refresh_join_growth", c.refresh_join_growth);
  if (!(c.refresh_join_growth >= 0))
    throw std::invalid_argument("cluster: scheduler.refresh_join_growth must be >= 0");
  read(s, "missed_renewal", c.missed_renewal);
  read(s, "admission_control", c.admission_control);
  read(s, "slack_budget", c.slack_budget);
  read(s, "oldest_missed_first", c.oldest_missed_first);
  read(s, "missed_grace", c.missed_grace);
  if (!(c.missed_grace >= 0) || c.missed_grace > 1e6)
    throw std::invalid_argument("cluster: scheduler.missed_grace must be in [0, 1e6]");
  if (!(c.missed_renewal >= 0) || c.missed_renewal > 1e6)
    throw std::invalid_argument("cluster: scheduler.missed_renewal must be in [0, 1e6]");
  if (c.refresh_split < 0) throw std::invalid_argument("cluster: scheduler.refresh_split must be >= 0");
  if (!(c.refresh_split_growth >= 0))
    throw std::invalid_argument("cluster: scheduler.refresh_split_growth must be >= 0");

  if (const auto cr = root["co_run"]) {
    if (cr["model"]) c.co_run.model = policy::parse_co_run_model(cr["model"].as<std::string>());
    read(cr, "sm_saturation", c.co_run.sm_saturation);
    read(cr, "max_reuse_share", c.co_run.max_reuse_share);
    read(cr, "tax", c.co_run.tax);
    if (!(c.co_run.sm_saturation > 0 && c.co_run.sm_saturation <= 1))
      throw std::invalid_argument("cluster: co_run.sm_saturation must be in (0, 1]");
    if (!(c.co_run.max_reuse_share > 0 && c.co_run.max_reuse_share < 1))
      throw std::invalid_argument("cluster: co_run.max_reuse_share must be in (0, 1)");
    if (!(c.co_run.tax >= 0 && c.co_run.tax < 1)) throw std::invalid_argument("cluster: co_run.tax must be in [0, 1)");
    if (c.co_run.model != policy::co_run_model::off && c.refresh_split > 0)
      throw std::invalid_argument("cluster: co_run runs whole refreshes; set scheduler.refresh_split to 0");
    const bool roofline = c.cost.kind() == policy::step_cost_model::form::roofline;
    if (!roofline && (c.co_run.model == policy::co_run_model::fluid || c.co_run.model == policy::co_run_model::partition))
      throw std::invalid_argument(std::string("cluster: co_run model '") + policy::co_run_model_name(c.co_run.model) +
                                  "' needs a roofline profile (use 'tax' with a measured one)");
  }

  const auto l = root["links"];
  read(l, "intra_node_bytes_per_s", c.link.intra_node_bytes_per_s);
  read(l, "inter_node_bytes_per_s", c.link.inter_node_bytes_per_s);
  read(l, "latency_s", c.link.latency_s);
  c.link.kv_bytes_per_token = c.cost.memory.kv_bytes_per_token > 0 ? c.cost.memory.kv_bytes_per_token
                                                                   : c.link.kv_bytes_per_token;

  const auto t = root["threshold"];
  read(t, "tau_min", c.threshold.tau_min);
  read(t, "tau_max", c.threshold.tau_max);
  read(t, "tau_step", c.threshold.tau_step);
  read(t, "accuracy_budget", c.threshold.accuracy_budget);
  read(root["control"], "interval_s", c.control_interval_s);

  const auto r = root["reconfig"];
  read(r, "interval_s", c.reconfig_interval_s);
  read(r, "forecast_window_s", c.forecast_window_s);
  read(r, "boot_from_forecast", c.boot_from_forecast);
  read(r, "forecast_subwindow_s", c.forecast_subwindow_s);
  read(r, "forecast_quantile", c.forecast_quantile);
  read(r, "regroup_cost_s", c.regroup_cost_s);
  read(r, "max_fraction", c.max_reconfig_fraction);
  read(r, "min_dwell_s", c.min_dwell_s);
  read(r, "attainment_target", c.reconfig.attainment_target);
  read(r, "utilization_max", c.reconfig.utilization_max);
  read(r, "capacity_units", c.reconfig.capacity_units);
  c.reconfig.ref_tau = c.ref_tau;
  c.reconfig.max_batch = c.max_batch;
  c.reconfig.token_budget = c.token_budget;
  // The optimizer plans for sustained operation, so with an accuracy budget it plans only at
  // levels whose loss the budget sustains for every request (tau control may go lower for a
  // few requests while the budget has credit).
  c.reconfig.tau_levels.clear();
  for (double tau : policy::tau_levels(c.threshold))
    if (c.threshold.accuracy_budget < 0 ||
        policy::accuracy_loss(c.quality, tau, c.threshold.tau_max) <= c.threshold.accuracy_budget + 1e-12 ||
        c.reconfig.tau_levels.empty())
      c.reconfig.tau_levels.push_back(tau);

  const auto m = root["migration"];
  read(m, "interval_s", c.migration_interval_s);
  read(m, "max_moves", c.migration.max_moves);
  read(m, "imbalance", c.migration.imbalance);
  c.migration.token_budget = c.token_budget;
  c.migration.max_active = c.max_active;

  read(root, "drop_wait_factor", c.drop_wait_factor);
  if (root["on_miss"]) {
    const auto m = root["on_miss"].as<std::string>();
    if (m != "serve" && m != "reject") throw std::invalid_argument("cluster: on_miss must be serve or reject");
    c.reject_on_miss = m == "reject";
  }
  return c;
}

sim_cluster load_cluster(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open cluster file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto slash = path.find_last_of('/');
  return parse_cluster(ss.str(), slash == std::string::npos ? std::string(".") : path.substr(0, slash));
}

}  // namespace dls::sim
