#include "runtime/cluster_config.hpp"

#include <yaml-cpp/yaml.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace dls::runtime {

namespace {

using checker = config::yaml_checker;

// CAF's own parser knows each option's type, so the YAML tree is flattened into
// command-line style arguments ("--scheduler.max-threads=2") and handed to it.
// `section` is where the options sit in the file ("caf" or "head.caf"), for the errors.
void flatten_caf(const checker& c, const YAML::Node& n, const std::string& prefix,
                 std::vector<std::string>& out, const std::string& section = "caf") {
  c.expect_map(n, prefix.empty() ? section : section + "." + prefix);
  for (const auto& kv : n) {
    auto key = prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar();
    if (kv.second.IsMap()) {
      flatten_caf(c, kv.second, key, out, section);
    } else if (kv.second.IsScalar()) {
      out.push_back("--" + key + "=" + kv.second.Scalar());
    } else if (kv.second.IsSequence()) {
      std::string list;
      for (const auto& e : kv.second) list += (list.empty() ? "" : ",") + c.str(e, section + "." + key);
      out.push_back("--" + key + "=[" + list + "]");
    } else {
      c.fail(kv.second, section + "." + key + " has no value");
    }
  }
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

// The keys of the shared sections (config/cluster_schema.hpp) that only a running cluster has.
const std::set<std::string> runtime_node_keys = config::keys_of({config::node_keys(), {"host", "port"}});
const std::set<std::string> runtime_engine_keys = config::keys_of(
    {config::engine_keys(),
     {"gen_length", "commit", "temperature", "seed", "top_p", "top_k", "alg_temp",
      "steps_per_block", "schedule", "eps"}});
const std::set<std::string> runtime_scheduler_keys = config::keys_of({config::scheduler_keys(), {"policy", "slo_scale"}});
const std::set<std::string> runtime_reconfigure_keys = config::keys_of({config::reconfigure_keys(), {"mode"}});

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
  c.check_keys(n,
               {"tls", "net_devices", "rndv_threshold_bytes", "part_bytes", "tcp_segment_bytes", "timeout_ms", "kv_move",
                "snapshots", "encrypt"},
               "ucx");
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
  if (n["part_bytes"])
    u.part_bytes = static_cast<std::size_t>(c.integer(n["part_bytes"], "ucx.part_bytes", 0, 1LL << 30));
  // Parts below a page cost a message each for almost nothing hashed.
  constexpr std::size_t min_part_bytes = 4096;
  if (u.part_bytes != 0 && u.part_bytes < min_part_bytes)
    c.fail(n["part_bytes"], "ucx.part_bytes must be 0 (send whole) or at least " + std::to_string(min_part_bytes));
  // 0 keeps UCX's own sizes; UCX needs room for its headers in a segment; beyond 64 MiB a
  // segment only holds memory.
  constexpr long long min_segment = 4096, max_segment = 64LL << 20;
  if (n["tcp_segment_bytes"]) {
    u.tcp_segment_bytes =
        static_cast<std::size_t>(c.integer(n["tcp_segment_bytes"], "ucx.tcp_segment_bytes", 0, max_segment));
    if (u.tcp_segment_bytes != 0 && u.tcp_segment_bytes < static_cast<std::size_t>(min_segment))
      c.fail(n["tcp_segment_bytes"],
             "ucx.tcp_segment_bytes must be 0 (UCX's own) or at least " + std::to_string(min_segment));
  }
  if (n["timeout_ms"]) u.timeout_ms = static_cast<int>(c.integer(n["timeout_ms"], "ucx.timeout_ms", 1, 3600000));
  if (n["kv_move"]) u.kv_move = c.one_of(n["kv_move"], "ucx.kv_move", {"auto", "transfer", "rebuild"});
  if (n["snapshots"]) u.snapshots = c.one_of(n["snapshots"], "ucx.snapshots", {"head", "peer"});
  if (n["encrypt"]) u.encrypt = c.one_of(n["encrypt"], "ucx.encrypt", {"true", "false"}) == "true";
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
  h.api_keys_file = config::resolve_path(c.str(keys, "http.api_keys_file"), base_dir);
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

std::vector<std::string> cluster_config::head_process_caf_args() const {
  auto args = process_caf_args();
  args.push_back("--scheduler.max-threads=1");
  args.insert(args.end(), head_caf_args.begin(), head_caf_args.end());
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
  YAML::Node root = c.load(text);
  c.check_keys(root, {"name", "auth", "head", "heartbeat", "nodes", "model", "engine", "limits", "retention",
                      "scheduler", "reconfigure", "migration", "launch", "caf", "http", "ucx"},
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
      auto path = config::resolve_path(c.str(auth[key_file], "auth." + key_file), base_dir);
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
  if (auth["tls_dir"]) cfg.tls_dir = config::resolve_path(c.str(auth["tls_dir"], "auth.tls_dir"), base_dir);
  if (auth["insecure"]) {
    auto v = c.one_of(auth["insecure"], "auth.insecure", {"true", "false"});
    cfg.insecure = v == "true";
    if (cfg.insecure && auth["tls_dir"]) c.fail(auth["tls_dir"], "auth.tls_dir makes no sense with auth.insecure: true");
  }

  auto head = c.require(root, "head", "the top level");
  c.check_keys(head, {"host", "port", "wal", "caf"}, "head");
  if (head["wal"]) cfg.head_wal = c.one_of(head["wal"], "head.wal", {"true", "false"}) == "true";
  if (head["caf"]) flatten_caf(c, head["caf"], "", cfg.head_caf_args, "head.caf");
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

  cfg.nodes = config::parse_nodes(c, c.require(root, "nodes", "the top level"), runtime_node_keys, false);

  auto model = c.require(root, "model", "the top level");
  c.check_keys(model, {"path"}, "model");
  cfg.model_path = config::resolve_path(c.str(c.require(model, "path", "model"), "model.path"), base_dir);

  if (auto eng = root["engine"]) cfg.engine = config::parse_engine(c, eng, runtime_engine_keys);
  if (auto limits = root["limits"]) cfg.limits = parse_limits(c, limits);
  if (auto retention = root["retention"]) cfg.retention = parse_retention(c, retention);
  if (cfg.limits.max_gen_length > 0 && cfg.engine.decode.gen_length > cfg.limits.max_gen_length)
    c.fail(root["limits"]["max_gen_length"], "engine.gen_length (" + std::to_string(cfg.engine.decode.gen_length) +
                                                 ") exceeds limits.max_gen_length (" +
                                                 std::to_string(cfg.limits.max_gen_length) + ")");
  if (auto sch = root["scheduler"])
    cfg.scheduler = config::parse_scheduler(c, sch, runtime_scheduler_keys, base_dir, cfg.engine.decode.threshold);
  if (auto rc = root["reconfigure"]) cfg.reconfigure = config::parse_reconfigure(c, rc, runtime_reconfigure_keys);
  if (auto m = root["migration"]) cfg.migration = config::parse_migration(c, m);

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

bool is_local_host(const std::string& host) {
  if (host == "127.0.0.1" || host == "localhost" || host == "::1") return true;
  char name[256] = {};
  return gethostname(name, sizeof(name) - 1) == 0 && host == name;
}

}  // namespace dls::runtime
