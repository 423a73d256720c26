#include "runtime/cluster_config.hpp"

#include "common/layout.hpp"

#include "policies/presets.hpp"
#include "policies/quality.hpp"
#include "policies/step_cost.hpp"

#include <yaml-cpp/yaml.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace dls::runtime {

namespace {

// Every check throws with the position of the offending YAML node, so the user can
// jump straight to it.
class checker {
 public:
  explicit checker(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const YAML::Mark& m, const std::string& what) const {
    std::ostringstream os;
    os << file_;
    if (!m.is_null()) os << ':' << m.line + 1 << ':' << m.column + 1;
    os << ": error: " << what;
    throw config_error(os.str());
  }
  [[noreturn]] void fail(const YAML::Node& n, const std::string& what) const {
    fail(n.Mark(), what);
  }

  void expect_map(const YAML::Node& n, const std::string& ctx) const {
    if (!n.IsMap()) fail(n, ctx + " must be a mapping");
  }

  // Rejects unknown and duplicate keys; yaml-cpp keeps duplicates during iteration.
  void check_keys(const YAML::Node& map, const std::set<std::string>& allowed,
                  const std::string& ctx) const {
    expect_map(map, ctx);
    std::set<std::string> seen;
    for (const auto& kv : map) {
      if (!kv.first.IsScalar()) fail(kv.first, "keys in " + ctx + " must be plain names");
      auto key = kv.first.Scalar();
      if (!allowed.count(key)) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        fail(kv.first, "unknown key '" + key + "' in " + ctx + " (allowed: " + list + ")");
      }
      if (!seen.insert(key).second) fail(kv.first, "duplicate key '" + key + "' in " + ctx);
    }
  }

  YAML::Node require(const YAML::Node& map, const std::string& key, const std::string& ctx) const {
    auto v = map[key];
    if (!v) fail(map, "missing field '" + key + "' in " + ctx);
    return v;
  }

  std::string str(const YAML::Node& n, const std::string& what) const {
    if (!n.IsScalar()) fail(n, what + " must be a string");
    return n.Scalar();
  }

  long long integer(const YAML::Node& n, const std::string& what, long long lo,
                    long long hi) const {
    if (!n.IsScalar()) fail(n, what + " must be an integer");
    long long v = 0;
    try {
      std::size_t used = 0;
      v = std::stoll(n.Scalar(), &used);
      if (used != n.Scalar().size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      fail(n, what + " must be an integer, got '" + n.Scalar() + "'");
    }
    if (v < lo || v > hi)
      fail(n, what + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                  "], got " + std::to_string(v));
    return v;
  }

  double real(const YAML::Node& n, const std::string& what, double lo, double hi) const {
    if (!n.IsScalar()) fail(n, what + " must be a number");
    double v = 0;
    try {
      std::size_t used = 0;
      v = std::stod(n.Scalar(), &used);
      if (used != n.Scalar().size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      fail(n, what + " must be a number, got '" + n.Scalar() + "'");
    }
    if (!(v >= lo && v <= hi)) {
      std::ostringstream os;
      os << what << " must be in [" << lo << ", " << hi << "], got " << n.Scalar();
      fail(n, os.str());
    }
    return v;
  }

  std::string one_of(const YAML::Node& n, const std::string& what,
                     const std::set<std::string>& choices) const {
    auto v = str(n, what);
    if (!choices.count(v)) {
      std::string list;
      for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
      fail(n, what + " must be one of " + list + ", got '" + v + "'");
    }
    return v;
  }

  std::vector<int> int_list(const YAML::Node& n, const std::string& what, int lo, int hi) const {
    if (!n.IsSequence()) fail(n, what + " must be a list of integers, e.g. [2] or [1, 1]");
    std::vector<int> out;
    for (const auto& e : n) out.push_back(static_cast<int>(integer(e, what + " entries", lo, hi)));
    return out;
  }

  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

std::string resolve(const std::string& p, const std::string& base_dir) {
  if (p.empty()) return p;
  fs::path path = p;
  if (p.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    path = fs::path(home ? home : "/") / p.substr(2);
  } else if (path.is_relative()) {
    path = fs::path(base_dir) / path;
  }
  return fs::weakly_canonical(path).string();
}

// CAF's own parser knows each option's type, so the YAML tree is flattened into
// command-line style arguments ("--scheduler.max-threads=2") and handed to it.
void flatten_caf(const checker& c, const YAML::Node& n, const std::string& prefix,
                 std::vector<std::string>& out) {
  c.expect_map(n, prefix.empty() ? "caf" : "caf." + prefix);
  for (const auto& kv : n) {
    auto key = prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar();
    if (kv.second.IsMap()) {
      flatten_caf(c, kv.second, key, out);
    } else if (kv.second.IsScalar()) {
      out.push_back("--" + key + "=" + kv.second.Scalar());
    } else if (kv.second.IsSequence()) {
      std::string list;
      for (const auto& e : kv.second) list += (list.empty() ? "" : ",") + c.str(e, "caf." + key);
      out.push_back("--" + key + "=[" + list + "]");
    } else {
      c.fail(kv.second, "caf." + key + " has no value");
    }
  }
}

device_spec parse_devices(const checker& c, const YAML::Node& n, const std::string& ctx) {
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

node_config parse_node(const checker& c, const YAML::Node& n, std::size_t index) {
  auto ctx = "nodes[" + std::to_string(index) + "]";
  c.check_keys(n, {"name", "host", "port", "devices", "groups"}, ctx);
  node_config node;
  node.name = c.str(c.require(n, "name", ctx), ctx + ".name");
  if (node.name.empty() || node.name.find_first_of(" /:\t") != std::string::npos)
    c.fail(n["name"], ctx + ".name must be non-empty without spaces, '/' or ':'");
  ctx = "node '" + node.name + "'";
  if (n["host"]) node.host = c.str(n["host"], ctx + " host");
  if (n["port"]) node.port = static_cast<uint16_t>(c.integer(n["port"], ctx + " port", 0, 65535));
  auto devs = c.require(n, "devices", ctx);
  node.devices = parse_devices(c, devs, ctx + " devices");
  if (n["groups"]) {
    node.groups = c.int_list(n["groups"], ctx + " groups", 1, 1024);
    if (auto why = common::layout_problem(node.devices.slots(), node.groups); !why.empty())
      c.fail(n["groups"], ctx + " " + why);
  } else {
    node.groups.assign(static_cast<std::size_t>(node.devices.slots()), 1);
  }
  return node;
}

engine_defaults parse_engine(const checker& c, const YAML::Node& n) {
  c.check_keys(n, {"gen_length", "block_length", "commit", "threshold", "cache", "refresh_interval",
                   "temperature", "seed", "max_batch"},
               "engine");
  engine_defaults e;
  if (n["gen_length"]) e.gen_length = static_cast<int>(c.integer(n["gen_length"], "engine.gen_length", 1, 8192));
  if (n["block_length"])
    e.block_length = static_cast<int>(c.integer(n["block_length"], "engine.block_length", 1, 8192));
  if (e.gen_length % e.block_length != 0)
    c.fail(n["block_length"] ? n["block_length"] : n,
           "engine.gen_length (" + std::to_string(e.gen_length) + ") must be a multiple of block_length (" +
               std::to_string(e.block_length) + ")");
  if (n["commit"]) e.commit = c.one_of(n["commit"], "engine.commit", {"quota", "threshold", "factor", "margin", "entropy"});
  if (n["threshold"]) e.threshold = c.real(n["threshold"], "engine.threshold", 0.0, 1.0);
  if (n["cache"]) e.cache = c.one_of(n["cache"], "engine.cache", {"none", "prefix", "dual"});
  if (n["refresh_interval"])
    e.refresh_interval = static_cast<int>(c.integer(n["refresh_interval"], "engine.refresh_interval", 1, 1 << 20));
  if (n["temperature"]) e.temperature = c.real(n["temperature"], "engine.temperature", 0.0, 100.0);
  if (n["seed"])
    e.seed = static_cast<uint64_t>(c.integer(n["seed"], "engine.seed", 0, std::numeric_limits<long long>::max()));
  if (n["max_batch"]) e.max_batch = static_cast<int>(c.integer(n["max_batch"], "engine.max_batch", 1, 4096));
  return e;
}

request_limits parse_limits(const checker& c, const YAML::Node& n) {
  c.check_keys(n, {"max_prompt_bytes", "max_prompt_tokens", "max_gen_length"}, "limits");
  request_limits l;
  // A BASP message carries its length in 32 bits; 1 GiB keeps any prompt far below that.
  constexpr long long max_bytes = 1LL << 30;
  constexpr long long max_tokens = 1LL << 24;  // far beyond any model's context
  if (n["max_prompt_bytes"]) l.max_prompt_bytes = c.integer(n["max_prompt_bytes"], "limits.max_prompt_bytes", 1, max_bytes);
  if (n["max_prompt_tokens"])
    l.max_prompt_tokens = c.integer(n["max_prompt_tokens"], "limits.max_prompt_tokens", 1, max_tokens);
  if (n["max_gen_length"]) l.max_gen_length = c.integer(n["max_gen_length"], "limits.max_gen_length", 1, max_tokens);
  return l;
}

directory_retention parse_retention(const checker& c, const YAML::Node& n) {
  c.check_keys(n, {"finished_requests", "finished_age_s"}, "retention");
  directory_retention r;
  constexpr long long max_rows = 10'000'000;   // ~25 GB of rows: anything above is a typo
  constexpr long long max_age_s = 366LL * 24 * 3600;
  if (n["finished_requests"])
    r.finished_requests = c.integer(n["finished_requests"], "retention.finished_requests", 0, max_rows);
  if (n["finished_age_s"]) r.finished_age_s = c.integer(n["finished_age_s"], "retention.finished_age_s", 0, max_age_s);
  return r;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `scheduler: NAME` or a map {policy: NAME, knobs...}. Names are those of policies/presets.hpp.
scheduler_settings parse_scheduler(const checker& c, const YAML::Node& n, const std::string& base_dir,
                                   double tau_ref) {
  scheduler_settings s;
  std::set<std::string> names;
  for (const auto& name : policy::policy_set_names()) names.insert(name);
  if (n.IsScalar()) {
    s.policy = c.one_of(n, "scheduler", names);
    return s;
  }
  c.check_keys(n, {"policy", "slo_scale", "token_budget", "max_active", "tau_min", "tau_step", "accuracy_budget", "on_overload", "on_miss", "profile", "quality"},
               "scheduler");
  if (n["policy"]) s.policy = c.one_of(n["policy"], "scheduler.policy", names);
  if (n["slo_scale"]) s.slo_scale = c.real(n["slo_scale"], "scheduler.slo_scale", 0.01, 1e6);
  if (n["token_budget"])
    s.token_budget = static_cast<int>(c.integer(n["token_budget"], "scheduler.token_budget", 1, 1 << 24));
  if (n["max_active"]) s.max_active = static_cast<int>(c.integer(n["max_active"], "scheduler.max_active", 1, 1 << 16));
  if (n["tau_min"]) s.tau_min = c.real(n["tau_min"], "scheduler.tau_min (at most engine.threshold)", 0.0, tau_ref);
  if (n["tau_step"]) s.tau_step = c.real(n["tau_step"], "scheduler.tau_step", 0.001, 1.0);
  if (n["accuracy_budget"])
    s.accuracy_budget = c.real(n["accuracy_budget"], "scheduler.accuracy_budget (a fraction: 0.01 = one point)", 0.0, 1.0);
  if (n["on_overload"]) s.refuse_overload = c.one_of(n["on_overload"], "scheduler.on_overload", {"queue", "refuse"}) == "refuse";
  if (n["on_miss"]) s.reject_on_miss = c.one_of(n["on_miss"], "scheduler.on_miss", {"serve", "reject"}) == "reject";
  if (n["profile"]) {
    try {
      set_profile(s, resolve(c.str(n["profile"], "scheduler.profile"), base_dir));
    } catch (const config_error& e) {
      c.fail(n["profile"], std::string("scheduler.profile: ") + e.what());
    }
  }
  if (n["quality"]) {
    s.quality_path = resolve(c.str(n["quality"], "scheduler.quality"), base_dir);
    try {
      s.quality_text = read_text(s.quality_path);
      policy::parse_quality_curve(s.quality_text);
    } catch (const std::exception& e) {
      c.fail(n["quality"], "scheduler.quality: " + s.quality_path + ": " + e.what());
    }
  }
  return s;
}

// `reconfigure: manual | auto` or a map {mode, interval_ms, min_dwell_ms, window_ms, regroup_ms}.
reconfigure_settings parse_reconfigure(const checker& c, const YAML::Node& n) {
  reconfigure_settings r;
  if (n.IsScalar()) {
    r.automatic = c.one_of(n, "reconfigure", {"manual", "auto"}) == "auto";
    return r;
  }
  c.check_keys(n, {"mode", "interval_ms", "min_dwell_ms", "window_ms", "regroup_ms"}, "reconfigure");
  if (n["mode"]) r.automatic = c.one_of(n["mode"], "reconfigure.mode", {"manual", "auto"}) == "auto";
  if (n["interval_ms"])
    r.interval_ms = static_cast<int>(c.integer(n["interval_ms"], "reconfigure.interval_ms", 10, 3600000));
  if (n["min_dwell_ms"])
    r.min_dwell_ms = static_cast<int>(c.integer(n["min_dwell_ms"], "reconfigure.min_dwell_ms", 0, 86400000));
  if (n["window_ms"]) r.window_ms = static_cast<int>(c.integer(n["window_ms"], "reconfigure.window_ms", 10, 86400000));
  if (n["regroup_ms"]) r.regroup_ms = static_cast<int>(c.integer(n["regroup_ms"], "reconfigure.regroup_ms", 0, 86400000));
  return r;
}

std::string read_token_file(const checker& c, const YAML::Node& at, const std::string& path) {
  std::ifstream in(path);
  if (!in) c.fail(at, "cannot read token file '" + path + "'");
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) c.fail(at, "token file '" + path + "' is empty");
  return token;
}

// One key per line; blank lines and lines starting with '#' are skipped.
std::vector<std::string> read_api_keys(const checker& c, const YAML::Node& at, const std::string& path) {
  std::ifstream in(path);
  if (!in) c.fail(at, "cannot read api_keys_file '" + path + "'");
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    auto start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    line = line.substr(start);
    // Short keys are guessable; 16 characters is the floor of common API key schemes.
    if (line.size() < 16) c.fail(at, "api_keys_file '" + path + "' has a key shorter than 16 characters");
    if (line.find_first_of(" \t") != std::string::npos)
      c.fail(at, "api_keys_file '" + path + "' has a key with whitespace in it");
    keys.push_back(line);
  }
  if (keys.empty()) c.fail(at, "api_keys_file '" + path + "' holds no key");
  return keys;
}

// The UCX_TLS names of UCX 1.13; whether this host has them is checked when a node starts UCX.
const std::set<std::string>& ucx_transport_names() {
  static const std::set<std::string> names{"all", "sm", "shm", "posix", "sysv", "mm", "cma", "knem", "xpmem", "self",
                                           "tcp", "ib", "rc", "rc_v", "rc_x", "ud", "ud_v", "ud_x", "dc", "dc_x",
                                           "rdmacm", "cuda", "cuda_copy", "cuda_ipc", "gdr_copy", "rocm"};
  return names;
}

ucx_config parse_ucx(const checker& c, const YAML::Node& n) {
  c.check_keys(n, {"tls", "net_devices", "rndv_threshold_bytes", "timeout_ms", "kv_move"}, "ucx");
  ucx_config u;
  if (n["tls"]) {
    u.tls = c.str(n["tls"], "ucx.tls");
    std::stringstream parts(u.tls);
    std::string name;
    int count = 0;
    while (std::getline(parts, name, ',')) {
      ++count;
      if (!ucx_transport_names().count(name))
        c.fail(n["tls"], "ucx.tls: unknown UCX transport '" + name + "' (UCX_TLS names, e.g. tcp or shm,cma,tcp)");
    }
    if (count == 0 || u.tls.back() == ',') c.fail(n["tls"], "ucx.tls must name at least one transport");
  }
  if (n["net_devices"]) u.net_devices = c.str(n["net_devices"], "ucx.net_devices");
  if (u.net_devices.empty()) c.fail(n["net_devices"], "ucx.net_devices must not be empty (\"all\" uses every device)");
  if (n["rndv_threshold_bytes"])
    u.rndv_threshold_bytes =
        static_cast<std::size_t>(c.integer(n["rndv_threshold_bytes"], "ucx.rndv_threshold_bytes", 0, 1LL << 30));
  if (n["timeout_ms"]) u.timeout_ms = static_cast<int>(c.integer(n["timeout_ms"], "ucx.timeout_ms", 1, 3600000));
  if (n["kv_move"]) u.kv_move = c.one_of(n["kv_move"], "ucx.kv_move", {"auto", "transfer", "rebuild"});
  return u;
}

http_config parse_http(const checker& c, const YAML::Node& n, const std::string& base_dir) {
  c.check_keys(n, {"host", "port", "api_keys_file", "max_body_bytes", "max_concurrent", "metrics_public",
                   "request_timeout_s"},
               "http");
  http_config h;
  h.enabled = true;
  h.host = c.str(c.require(n, "host", "http"), "http.host");
  h.port = static_cast<uint16_t>(c.integer(c.require(n, "port", "http"), "http.port", 0, 65535));
  auto keys = c.require(n, "api_keys_file", "http");
  h.api_keys_file = resolve(c.str(keys, "http.api_keys_file"), base_dir);
  h.api_keys = read_api_keys(c, keys, h.api_keys_file);
  if (n["max_body_bytes"])
    h.max_body_bytes = static_cast<std::size_t>(c.integer(n["max_body_bytes"], "http.max_body_bytes", 1024, 1 << 30));
  if (n["max_concurrent"])
    h.max_concurrent = static_cast<int>(c.integer(n["max_concurrent"], "http.max_concurrent", 1, 4096));
  if (n["metrics_public"]) {
    auto v = c.one_of(n["metrics_public"], "http.metrics_public", {"true", "false"});
    h.metrics_public = v == "true";
  }
  if (n["request_timeout_s"])
    h.request_timeout_s = static_cast<int>(c.integer(n["request_timeout_s"], "http.request_timeout_s", 1, 86400));
  return h;
}

}  // namespace

std::vector<std::string> cluster_config::process_caf_args() const {
  // One second past the head's own heartbeat check, so a stopped node is reported by that
  // check (it names the silence) and BASP only catches what the check cannot see, such as a
  // stopped head seen from a node.
  constexpr int after_heartbeat_check_ms = 1000;
  std::vector<std::string> args{"--middleman.connection-timeout=" +
                                std::to_string(dead_after_ms + after_heartbeat_check_ms) + "ms"};
  args.insert(args.end(), caf_args.begin(), caf_args.end());
  return args;
}

const node_config* cluster_config::find_node(const std::string& node_name) const {
  for (const auto& n : nodes)
    if (n.name == node_name) return &n;
  return nullptr;
}

cluster_config parse_cluster_config(const std::string& text, const std::string& file_label,
                                    const std::string& base_dir) {
  checker c(file_label);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    c.fail(e.mark, e.msg);
  }
  if (!root || root.IsNull()) c.fail(YAML::Mark::null_mark(), "the file is empty");
  c.check_keys(root, {"name", "auth", "head", "heartbeat", "nodes", "model", "engine", "limits", "retention",
                      "scheduler", "reconfigure", "launch", "caf", "http", "ucx"},
               "the top level");
  cluster_config cfg;
  cfg.file = file_label;
  cfg.name = c.str(c.require(root, "name", "the top level"), "name");

  auto auth = c.require(root, "auth", "the top level");
  c.check_keys(auth, {"token", "token_file", "submit_token", "submit_token_file", "node_token", "node_token_file",
                      "tls_dir", "insecure"},
               "auth");
  // One credential per role; only the admin token is required (it may also join nodes and
  // submit), the others let an operator hand out less.
  auto credential = [&](const std::string& key, std::string& token, std::string* file, bool required) {
    auto key_file = key + "_file";
    if (auth[key] && auth[key_file]) c.fail(auth, "auth: give either '" + key + "' or '" + key_file + "', not both");
    if (auth[key]) {
      token = c.str(auth[key], "auth." + key);
      if (token.size() < 8) c.fail(auth[key], "auth." + key + " must have at least 8 characters");
    } else if (auth[key_file]) {
      auto path = resolve(c.str(auth[key_file], "auth." + key_file), base_dir);
      if (file) *file = path;
      token = read_token_file(c, auth[key_file], path);
      if (token.size() < 8) c.fail(auth[key_file], "the token in '" + path + "' must have at least 8 characters");
    } else if (required) {
      c.fail(auth, "auth needs '" + key + "' or '" + key_file + "'");
    }
  };
  credential("token", cfg.token, &cfg.token_file, true);
  credential("submit_token", cfg.submit_token, nullptr, false);
  credential("node_token", cfg.node_token, nullptr, false);
  if ((!cfg.submit_token.empty() && cfg.submit_token == cfg.token) ||
      (!cfg.node_token.empty() && cfg.node_token == cfg.token) ||
      (!cfg.node_token.empty() && cfg.node_token == cfg.submit_token))
    c.fail(auth, "auth: the admin, submit and node tokens must differ, or the roles mean nothing");
  if (auth["tls_dir"]) cfg.tls_dir = resolve(c.str(auth["tls_dir"], "auth.tls_dir"), base_dir);
  if (auth["insecure"]) {
    auto v = c.one_of(auth["insecure"], "auth.insecure", {"true", "false"});
    cfg.insecure = v == "true";
    if (cfg.insecure && auth["tls_dir"]) c.fail(auth["tls_dir"], "auth.tls_dir makes no sense with auth.insecure: true");
  }

  auto head = c.require(root, "head", "the top level");
  c.check_keys(head, {"host", "port", "wal"}, "head");
  if (head["wal"]) cfg.head_wal = c.one_of(head["wal"], "head.wal", {"true", "false"}) == "true";
  cfg.head_host = c.str(c.require(head, "host", "head"), "head.host");
  cfg.head_port = static_cast<uint16_t>(c.integer(c.require(head, "port", "head"), "head.port", 0, 65535));

  if (auto hb = root["heartbeat"]) {
    c.check_keys(hb, {"interval_ms", "dead_after_ms", "head_grace_ms"}, "heartbeat");
    if (hb["head_grace_ms"])
      cfg.head_grace_ms = static_cast<int>(c.integer(hb["head_grace_ms"], "heartbeat.head_grace_ms", 0, 3600000));
    if (hb["interval_ms"])
      cfg.heartbeat_interval_ms = static_cast<int>(c.integer(hb["interval_ms"], "heartbeat.interval_ms", 10, 60000));
    if (hb["dead_after_ms"])
      cfg.dead_after_ms = static_cast<int>(c.integer(hb["dead_after_ms"], "heartbeat.dead_after_ms", 50, 600000));
    if (cfg.dead_after_ms < 2 * cfg.heartbeat_interval_ms)
      c.fail(hb, "heartbeat.dead_after_ms must be at least twice interval_ms");
  }

  auto nodes = c.require(root, "nodes", "the top level");
  if (!nodes.IsSequence() || nodes.size() == 0) c.fail(nodes, "nodes must be a non-empty list");
  std::set<std::string> names;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    auto node = parse_node(c, nodes[i], i);
    if (!names.insert(node.name).second) c.fail(nodes[i]["name"], "duplicate node name '" + node.name + "'");
    cfg.nodes.push_back(std::move(node));
  }

  auto model = c.require(root, "model", "the top level");
  c.check_keys(model, {"path"}, "model");
  cfg.model_path = resolve(c.str(c.require(model, "path", "model"), "model.path"), base_dir);

  if (auto eng = root["engine"]) cfg.engine = parse_engine(c, eng);
  if (auto limits = root["limits"]) cfg.limits = parse_limits(c, limits);
  if (auto retention = root["retention"]) cfg.retention = parse_retention(c, retention);
  if (cfg.limits.max_gen_length > 0 && cfg.engine.gen_length > cfg.limits.max_gen_length)
    c.fail(root["limits"]["max_gen_length"], "engine.gen_length (" + std::to_string(cfg.engine.gen_length) +
                                                 ") exceeds limits.max_gen_length (" +
                                                 std::to_string(cfg.limits.max_gen_length) + ")");
  if (auto sch = root["scheduler"]) cfg.scheduler = parse_scheduler(c, sch, base_dir, cfg.engine.threshold);
  if (auto rc = root["reconfigure"]) cfg.reconfigure = parse_reconfigure(c, rc);

  if (auto launch = root["launch"]) {
    c.check_keys(launch, {"command"}, "launch");
    cfg.launch_command = c.str(c.require(launch, "command", "launch"), "launch.command");
    if (cfg.launch_command.find("{command}") == std::string::npos)
      c.fail(launch["command"], "launch.command must contain {command}");
  }

  if (auto caf = root["caf"]) flatten_caf(c, caf, "", cfg.caf_args);
  if (auto http = root["http"]) cfg.http = parse_http(c, http, base_dir);
  if (auto ucx = root["ucx"]) cfg.ucx = parse_ucx(c, ucx);
  return cfg;
}

cluster_config load_cluster_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw config_error(path + ": error: cannot open the file");
  std::stringstream ss;
  ss << in.rdbuf();
  auto base = fs::absolute(fs::path(path)).parent_path().string();
  return parse_cluster_config(ss.str(), path, base);
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

bool is_local_host(const std::string& host) {
  if (host == "127.0.0.1" || host == "localhost" || host == "::1") return true;
  char name[256] = {};
  return gethostname(name, sizeof(name) - 1) == 0 && host == name;
}

}  // namespace dls::runtime
