#include "config/cluster_schema.hpp"

#include "policies/presets.hpp"
#include "policies/quality.hpp"
#include "policies/step_cost.hpp"

#include <limits>

namespace dls::config {

// Function-local sets: the files' own key sets are built from these during static initialisation.
const std::set<std::string>& node_keys() {
  static const std::set<std::string> keys{"name", "devices", "groups"};
  return keys;
}

const std::set<std::string>& engine_keys() {
  static const std::set<std::string> keys{"block_length", "threshold", "max_batch", "cache", "refresh_interval"};
  return keys;
}

const std::set<std::string>& scheduler_keys() {
  static const std::set<std::string> keys{"token_budget", "max_active", "tau_min", "tau_step", "accuracy_budget",
                                          "on_overload",  "on_miss",    "profile", "quality", "cap_forecast_ms",
                                          "cap_forecast_refresh_ms", "control_interval_ms",
                                          "slo_request_overhead_ms"};
  return keys;
}

const std::set<std::string>& reconfigure_keys() {
  static const std::set<std::string> keys{"interval_ms",       "min_dwell_ms",    "window_ms",
                                          "regroup_ms",        "attainment_target", "utilization_max",
                                          "capacity_units",    "forecast_subwindow_ms", "forecast_quantile",
                                          "max_fraction"};
  return keys;
}

namespace {

device_spec parse_devices(const yaml_checker& c, const YAML::Node& n, const std::string& ctx) {
  c.check_keys(n, {"kind", "count", "ids"}, ctx);
  device_spec d;
  d.kind = c.one_of(c.require(n, "kind", ctx), ctx + ".kind", {"cpu", "cuda"});
  if (d.kind == "cpu") {
    if (n["ids"]) c.fail(n["ids"], ctx + ": 'ids' is only for kind cuda; use 'count'");
    d.count = static_cast<int>(c.integer(c.require(n, "count", ctx), ctx + ".count", 1, 1024));
  } else if (n["count"]) {
    // `count: N` is devices 0..N-1; `ids` picks them.
    if (n["ids"]) c.fail(n["ids"], ctx + ": give either 'count' or 'ids', not both");
    const auto count = static_cast<int>(c.integer(n["count"], ctx + ".count", 1, 1024));
    for (int i = 0; i < count; ++i) d.ids.push_back(i);
  } else {
    d.ids = c.int_list(c.require(n, "ids", ctx), ctx + ".ids", 0, 1023);
    if (d.ids.empty()) c.fail(n["ids"], ctx + ".ids must not be empty");
    std::set<int> uniq(d.ids.begin(), d.ids.end());
    if (uniq.size() != d.ids.size()) c.fail(n["ids"], ctx + ".ids lists a device twice");
  }
  return d;
}

node_config parse_node(const yaml_checker& c, const YAML::Node& n, std::size_t index, const std::set<std::string>& keys,
                       bool whole) {
  auto ctx = "nodes[" + std::to_string(index) + "]";
  c.check_keys(n, keys, ctx);
  node_config node;
  node.name = c.str(c.require(n, "name", ctx), ctx + ".name");
  if (node.name.empty() || node.name.find_first_of(" /:\t") != std::string::npos)
    c.fail(n["name"], ctx + ".name must be non-empty without spaces, '/' or ':'");
  ctx = "node '" + node.name + "'";
  if (n["host"]) node.host = c.str(n["host"], ctx + " host");
  if (n["port"]) node.port = static_cast<uint16_t>(c.integer(n["port"], ctx + " port", 0, 65535));
  // 1 M identical nodes: far beyond any cluster, small enough that the count cannot overflow.
  if (n["replicas"]) node.replicas = static_cast<int>(c.integer(n["replicas"], ctx + " replicas", 1, 1 << 20));
  node.devices = parse_devices(c, c.require(n, "devices", ctx), ctx + " devices");
  if (n["groups"]) {
    node.groups = c.int_list(n["groups"], ctx + " groups", 1, 1024);
    if (auto why = common::layout_problem(node.devices.slots(), node.groups, whole); !why.empty())
      c.fail(n["groups"], ctx + " " + why);
  } else {
    node.groups.assign(static_cast<std::size_t>(node.devices.slots()), 1);
  }
  return node;
}

}  // namespace

std::vector<node_config> parse_nodes(const yaml_checker& c, const YAML::Node& n, const std::set<std::string>& keys,
                                     bool whole) {
  if (!n.IsSequence() || n.size() == 0) c.fail(n, "nodes must be a non-empty list");
  std::vector<node_config> out;
  std::set<std::string> names;
  for (std::size_t i = 0; i < n.size(); ++i) {
    auto node = parse_node(c, n[i], i, keys, whole);
    if (!names.insert(node.name).second) c.fail(n[i]["name"], "duplicate node name '" + node.name + "'");
    out.push_back(std::move(node));
  }
  return out;
}

engine_defaults parse_engine(const yaml_checker& c, const YAML::Node& n, const std::set<std::string>& keys) {
  c.check_keys(n, keys, "engine");
  engine_defaults e;
  auto& d = e.decode;
  if (n["gen_length"]) d.gen_length = static_cast<int>(c.integer(n["gen_length"], "engine.gen_length", 1, 8192));
  if (n["block_length"])
    d.block_length = static_cast<int>(c.integer(n["block_length"], "engine.block_length", 1, 8192));
  if (d.gen_length % d.block_length != 0)
    c.fail(n["block_length"] ? n["block_length"] : n,
           "engine.gen_length (" + std::to_string(d.gen_length) + ") must be a multiple of block_length (" +
               std::to_string(d.block_length) + ")");
  if (n["commit"])
    d.rule = common::parse_commit_rule(
        c.one_of(n["commit"], "engine.commit", {"quota", "threshold", "factor", "margin", "entropy", "origin"}));
  if (n["steps_per_block"])
    d.steps_per_block = static_cast<int>(c.integer(n["steps_per_block"], "engine.steps_per_block", 0, common::max_steps_per_block));
  if (n["schedule"])
    d.schedule = common::parse_step_schedule(c.one_of(n["schedule"], "engine.schedule", {"even", "dream_linear"}));
  if (n["threshold"]) d.threshold = c.real(n["threshold"], "engine.threshold", 0.0, 1.0);
  if (n["cache"]) d.cache = common::parse_cache_mode(c.one_of(n["cache"], "engine.cache", {"none", "prefix", "dual"}));
  if (n["refresh_interval"])
    d.refresh_interval = static_cast<int>(c.integer(n["refresh_interval"], "engine.refresh_interval", 0, 1 << 20));
  if (n["temperature"]) d.temperature = c.real(n["temperature"], "engine.temperature", 0.0, 100.0);
  if (n["seed"])
    d.seed = static_cast<uint64_t>(c.integer(n["seed"], "engine.seed", 0, std::numeric_limits<long long>::max()));
  if (n["top_p"]) d.top_p = c.real(n["top_p"], "engine.top_p", 0.0, 1.0);
  if (n["top_k"]) d.top_k = static_cast<int>(c.integer(n["top_k"], "engine.top_k", 0, 1 << 24));
  if (n["alg_temp"]) d.alg_temp = c.real(n["alg_temp"], "engine.alg_temp", 0.0, 1e6);
  if (n["eps"]) d.eps = c.real(n["eps"], "engine.eps", 0.0, 1.0);  // validate() refuses 1 itself
  if (auto why = d.validate(); !why.empty()) c.fail(n, "engine: " + why);
  if (n["max_batch"]) e.max_batch = static_cast<int>(c.integer(n["max_batch"], "engine.max_batch", 1, 4096));
  return e;
}

void set_profile(scheduler_settings& s, const std::string& path) {
  try {
    auto text = read_text(path);
    policy::parse_step_cost_profile(text);
    s.profile_path = path;
    s.profile_text = std::move(text);
  } catch (const std::exception& e) {
    throw config_error(path + ": " + e.what());
  }
}

scheduler_settings parse_scheduler(const yaml_checker& c, const YAML::Node& n, const std::set<std::string>& keys,
                                   const std::string& base_dir, double tau_ref) {
  scheduler_settings s;
  std::set<std::string> names;
  for (const auto& name : policy::policy_set_names()) names.insert(name);
  if (n.IsScalar() && keys.count("policy")) {
    s.policy = c.one_of(n, "scheduler", names);
    return s;
  }
  c.check_keys(n, keys, "scheduler");
  if (n["policy"]) s.policy = c.one_of(n["policy"], "scheduler.policy", names);
  if (n["slo_scale"]) s.slo_scale = c.real(n["slo_scale"], "scheduler.slo_scale", 0.01, 1e6);
  if (const auto& o = n["slo_request_overhead_ms"]; o && !(o.IsScalar() && o.Scalar() == "measure"))
    s.slo_request_overhead_ms =
        c.real(o, "scheduler.slo_request_overhead_ms (milliseconds, or measure)", 0.0, 1e6);
  if (n["token_budget"])
    s.token_budget = static_cast<int>(c.integer(n["token_budget"], "scheduler.token_budget", 1, 1 << 24));
  if (n["max_active"]) s.max_active = static_cast<int>(c.integer(n["max_active"], "scheduler.max_active", 1, 1 << 16));
  if (n["tau_min"]) s.tau_min = c.real(n["tau_min"], "scheduler.tau_min (at most engine.threshold)", 0.0, tau_ref);
  if (n["tau_step"]) s.tau_step = c.real(n["tau_step"], "scheduler.tau_step", 0.001, 1.0);
  if (n["accuracy_budget"]) {
    if (n["accuracy_budget"].IsScalar() && n["accuracy_budget"].Scalar() == "none")
      s.accuracy_budget = -1;
    else
      s.accuracy_budget =
          c.real(n["accuracy_budget"], "scheduler.accuracy_budget (a fraction: 0.01 = one point, or none)", 0.0, 1.0);
  }
  if (n["cap_forecast_ms"])
    s.cap_forecast_ms = static_cast<int>(c.integer(n["cap_forecast_ms"], "scheduler.cap_forecast_ms", 1, 86400000));
  if (n["cap_forecast_refresh_ms"])
    s.cap_forecast_refresh_ms =
        static_cast<int>(c.integer(n["cap_forecast_refresh_ms"], "scheduler.cap_forecast_refresh_ms", 1, 86400000));
  if (n["control_interval_ms"])
    s.control_interval_ms =
        static_cast<int>(c.integer(n["control_interval_ms"], "scheduler.control_interval_ms", 1, 86400000));
  if (n["on_overload"])
    s.refuse_overload = c.one_of(n["on_overload"], "scheduler.on_overload", {"queue", "refuse"}) == "refuse";
  if (n["on_miss"]) s.reject_on_miss = c.one_of(n["on_miss"], "scheduler.on_miss", {"serve", "reject"}) == "reject";
  if (n["profile"]) {
    try {
      set_profile(s, resolve_path(c.str(n["profile"], "scheduler.profile"), base_dir));
    } catch (const config_error& e) {
      c.fail(n["profile"], std::string("scheduler.profile: ") + e.what());
    }
  }
  if (n["quality"]) {
    s.quality_path = resolve_path(c.str(n["quality"], "scheduler.quality"), base_dir);
    try {
      s.quality_text = read_text(s.quality_path);
      policy::parse_quality_curve(s.quality_text);
    } catch (const std::exception& e) {
      c.fail(n["quality"], "scheduler.quality: " + s.quality_path + ": " + e.what());
    }
  }
  return s;
}

reconfigure_settings parse_reconfigure(const yaml_checker& c, const YAML::Node& n, const std::set<std::string>& keys) {
  reconfigure_settings r;
  if (n.IsScalar() && keys.count("mode")) {
    r.automatic = c.one_of(n, "reconfigure", {"manual", "auto"}) == "auto";
    return r;
  }
  c.check_keys(n, keys, "reconfigure");
  if (n["mode"]) r.automatic = c.one_of(n["mode"], "reconfigure.mode", {"manual", "auto"}) == "auto";
  if (n["interval_ms"])
    r.interval_ms = static_cast<int>(c.integer(n["interval_ms"], "reconfigure.interval_ms", 10, 3600000));
  if (n["min_dwell_ms"])
    r.min_dwell_ms = static_cast<int>(c.integer(n["min_dwell_ms"], "reconfigure.min_dwell_ms", 0, 86400000));
  if (n["window_ms"]) r.window_ms = static_cast<int>(c.integer(n["window_ms"], "reconfigure.window_ms", 10, 86400000));
  if (n["regroup_ms"])
    r.regroup_ms = static_cast<int>(c.integer(n["regroup_ms"], "reconfigure.regroup_ms", 0, 86400000));
  if (n["attainment_target"])
    r.attainment_target = c.real(n["attainment_target"], "reconfigure.attainment_target", 1e-9, 1);
  if (n["utilization_max"]) r.utilization_max = c.real(n["utilization_max"], "reconfigure.utilization_max", 1e-9, 1);
  if (n["capacity_units"])
    r.capacity_units = static_cast<int>(c.integer(n["capacity_units"], "reconfigure.capacity_units", 1, 1 << 24));
  if (n["forecast_subwindow_ms"])
    r.forecast_subwindow_ms =
        static_cast<int>(c.integer(n["forecast_subwindow_ms"], "reconfigure.forecast_subwindow_ms", 1, 86400000));
  if (n["forecast_quantile"]) r.forecast_quantile = c.real(n["forecast_quantile"], "reconfigure.forecast_quantile", 0, 1);
  if (n["max_fraction"]) r.max_fraction = c.real(n["max_fraction"], "reconfigure.max_fraction", 0, 1);
  return r;
}

migration_settings parse_migration(const yaml_checker& c, const YAML::Node& n) {
  migration_settings m;
  c.check_keys(n, {"interval_ms", "max_moves", "imbalance"}, "migration");
  if (n["interval_ms"])
    m.interval_ms = static_cast<int>(c.integer(n["interval_ms"], "migration.interval_ms", 1, 86400000));
  if (n["max_moves"]) m.max_moves = static_cast<int>(c.integer(n["max_moves"], "migration.max_moves", 0, 1 << 20));
  if (n["imbalance"]) m.imbalance = c.real(n["imbalance"], "migration.imbalance", 1, 1e6);
  return m;
}

}  // namespace dls::config
