#include "dilaserve/bench_live_migration.hpp"

#include "dilaserve/bench_cluster.hpp"
#include "dilaserve/median.hpp"
#include "dilaserve/random_model.hpp"
#include "gpu/kv_wire.hpp"
#include "gpu/model_config.hpp"
#include "gpu/tokenizer.hpp"
#include "policies/migration.hpp"
#include "policies/step_cost.hpp"
#include "runtime/client.hpp"
#include "runtime/messages.hpp"
#include "runtime/state_dir.hpp"

#include <caf/all.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include <signal.h>

namespace dls::cli {
namespace {

namespace fs = std::filesystem;
namespace rt = dls::runtime;
using json = nlohmann::json;

// The d_model 512 model of the in-process figures (4 layers, 8 heads of 64), with the shipped
// tokenizer; long enough for the largest length.
constexpr int big_d_model = 512;
constexpr int big_layers = 4;
constexpr int big_max_seq = 2048;
constexpr int big_block = 32;  // the in-process figures' block
// The cluster file's default SLO scale: the static policy set ignores deadlines anyway.
constexpr double slo_scale = 2.0;

// Two nodes of one TP-1 group each, on this host, with the data plane under test.
std::string write_config(const fs::path& dir, const std::string& model, const std::string& tls, bool encrypt,
                         const std::string& kv_move, int gen_length, int block_length) {
  YAML::Node root;
  root["name"] = "bench-migration";
  root["auth"]["token"] = "bench-migration-token";
  root["head"]["host"] = "127.0.0.1";
  root["head"]["port"] = 0;
  root["heartbeat"]["interval_ms"] = 300;
  root["heartbeat"]["dead_after_ms"] = 30000;  // a long refresh of the big model is no death
  for (const char* name : {"node0", "node1"}) {
    YAML::Node n;
    n["name"] = name;
    n["host"] = "127.0.0.1";
    n["devices"]["kind"] = "cpu";
    n["devices"]["count"] = 1;
    n["groups"].push_back(1);
    root["nodes"].push_back(n);
  }
  root["model"]["path"] = fs::absolute(model).string();
  root["engine"]["gen_length"] = gen_length;
  root["engine"]["block_length"] = block_length;
  root["engine"]["commit"] = "threshold";
  root["engine"]["threshold"] = 0.9;
  root["engine"]["cache"] = "dual";
  root["engine"]["refresh_interval"] = 4;
  root["scheduler"]["policy"] = "static";
  root["ucx"]["tls"] = tls;
  root["ucx"]["net_devices"] = "lo";
  root["ucx"]["kv_move"] = kv_move;
  root["ucx"]["encrypt"] = encrypt;
  root["caf"]["scheduler"]["policy"] = "sharing";
  root["caf"]["scheduler"]["max-threads"] = 2;
  fs::create_directories(dir);
  const auto path = (dir / "cluster.yaml").string();
  std::ofstream(path) << root << "\n";
  return path;
}

template <class... Ts>
json ask(rt::cluster_session& s, Ts&&... xs) {
  caf::scoped_actor self{s.system()};
  json out;
  self->request(s.head(), std::chrono::seconds(30), std::forward<Ts>(xs)...)
      .receive([&](std::string& text) { out = json::parse(text); },
               [&](caf::error& e) { throw std::runtime_error(s.system().render(e)); });
  return out;
}

// The node processes of a cluster, paused while a request is submitted and its order is given,
// so that the order reaches the group before the request's first step (the shipped model's
// requests finish within milliseconds).
struct paused_nodes {
  std::vector<int> pids;
  explicit paused_nodes(const std::string& state_dir) {
    for (const auto& p : rt::load_state(state_dir).processes)
      if (p.role == "node" && ::kill(p.pid, SIGSTOP) == 0) pids.push_back(p.pid);
  }
  ~paused_nodes() {
    for (int pid : pids) ::kill(pid, SIGCONT);
  }
};

// The bench's own wait for the head to place a request: a paused node's group cannot answer,
// but the head knows the placement as soon as it made it.
constexpr auto placement_wait = std::chrono::seconds(30);

// The request in flight and the group the head placed it on, from `status` (the bench is the
// cluster's only client, and its nodes are paused): its id is the head's, which also numbered
// the probes that measured the path overhead at startup. {0, ""} while there is none.
std::pair<uint64_t, std::string> placed_request(rt::cluster_session& s) {
  const std::string prefix = "request-";
  const auto status = ask(s, rt::status_atom::value);  // named: the loop reads into it
  for (const auto& r : status["requests"]["live"]) {
    const auto name = r.value("name", std::string());
    const auto group = r.value("group", std::string());
    if (!group.empty() && name.rfind(prefix, 0) == 0) return {std::stoull(name.substr(prefix.size())), group};
  }
  return {0, ""};
}

// Submits `prompt` at tau 1 (one token per step) with the nodes paused, orders it to the other
// node's group at `at` once the head placed it, resumes the nodes and waits for its answer.
void move_one(rt::cluster_session& s, const std::string& state_dir, const std::string& prompt, const std::string& at) {
  caf::scoped_actor self{s.system()};
  rt::submit_spec spec;
  spec.prompt = prompt;
  spec.threshold = 1.0;
  std::optional<paused_nodes> paused(std::in_place, state_dir);
  auto answer = self->request(s.head(), std::chrono::minutes(5), rt::submit_atom::value, spec);
  uint64_t id = 0;
  std::string from;
  const auto until = std::chrono::steady_clock::now() + placement_wait;
  while (from.empty() && std::chrono::steady_clock::now() < until) std::tie(id, from) = placed_request(s);
  if (from.empty()) throw std::runtime_error("the request was not placed within 30 s");
  const std::string to = from == "node0/g0" ? "node1/g0" : "node0/g0";
  const auto order = ask(s, rt::migrate_atom::value, id, to, at, s.credential());
  if (!order.value("ok", false)) throw std::runtime_error("migration order refused: " + order.dump());
  paused.reset();
  answer.receive(
      [&](rt::answer& a) {
        if (!a.ok) throw std::runtime_error("request " + std::to_string(id) + " failed: " + a.error);
        if (a.request_id != id)
          throw std::runtime_error("the cluster numbered the request " + std::to_string(a.request_id) + ", not " +
                                   std::to_string(id));
        if (a.group != to) throw std::runtime_error("request " + std::to_string(id) + " finished on " + a.group);
      },
      [&](caf::error& e) { throw std::runtime_error(s.system().render(e)); });
}

// Every group's downtime samples of kind `how`, by canvas length: field 1 of a sample is the
// time to the end of the first step at the destination, field 2 to its start.
std::map<int, std::vector<double>> downtimes(rt::cluster_session& s, const std::string& how, std::size_t field = 1) {
  auto status = ask(s, rt::status_atom::value);
  std::map<int, std::vector<double>> out;
  for (auto& g : status["groups"]) {
    if (!g.contains("migration_downtime") || !g["migration_downtime"].contains(how)) continue;
    for (auto& sample : g["migration_downtime"][how]) out[sample[0].get<int>()].push_back(sample[field].get<double>());
  }
  return out;
}

// The samples once the groups' last load reports (sent as their requests finish) reached the
// head: `expected` of them, or what there is after a few seconds.
std::map<int, std::vector<double>> settled(rt::cluster_session& s, const std::string& how, std::size_t expected,
                                           std::size_t field = 1) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    auto d = downtimes(s, how, field);
    std::size_t n = 0;
    for (auto& [rows, v] : d) n += v.size();
    if (n >= expected || std::chrono::steady_clock::now() > until) return d;
  }
}

// Where the live choice flips: the smallest canvas length at which policy::compare_kv_move, fed
// with the profile `up` measured for this cluster (its link for `tls`, its refresh and reuse
// step costs at TP 1) and the KV bytes of a TP-1 f32 cache of `cfg`, prefers the transfer.
json policy_crossover(const std::string& state_dir, const std::string& tls, const gpu::model_config& cfg, int block) {
  const auto profile = policy::load_step_cost_profile(state_dir + "/profile.yaml");
  const auto* link = policy::measured_link(profile.transfer, tls);
  if (!link) return {{"error", "the profile has no link for " + tls}};
  auto kv_bytes = [&](int L) {
    return 2.0 * cfg.n_layers * L * cfg.n_kv_heads * cfg.head_dim() * 4 + static_cast<double>(gpu::kv_header_bytes);
  };
  json out{{"link_bytes_per_s", link->bytes_per_s}, {"link_latency_s", link->latency_s}};
  for (int L = block + 1; L <= cfg.max_seq; ++L) {
    const auto c = policy::compare_kv_move(kv_bytes(L), *link, profile, 1, L, block);
    if (c.transfer) {
      out["L"] = L;
      out["kv_bytes"] = kv_bytes(L);
      out["transfer_ms"] = 1e3 * c.transfer_s;
      out["recompute_ms"] = 1e3 * c.recompute_s;
      out["meaning"] = L == block + 1 ? "transfer is chosen at every L" : "transfer is chosen from this L on";
      return out;
    }
  }
  out["meaning"] = "recompute is chosen at every L up to the model's max_seq";
  return out;
}

json summary(std::vector<double> v) {
  if (v.empty()) return {{"n", 0}};
  std::sort(v.begin(), v.end());
  const auto p99 = v[std::min(v.size() - 1, static_cast<std::size_t>(0.99 * static_cast<double>(v.size())))];
  return {{"p50", median(v)}, {"p99", p99}, {"n", v.size()}};
}

// A prompt of exactly `tokens` tokens of the shipped tokenizer.
std::string prompt_of(const gpu::tokenizer& tok, int tokens) {
  std::string p(static_cast<std::size_t>(tokens), '0');
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<char>('0' + (i * 7) % 10);
  for (int tries = 0; tries < 8; ++tries) {
    const int got = static_cast<int>(tok.encode(p).size());
    if (got == tokens) return p;
    if (got > tokens) p.resize(p.size() - static_cast<std::size_t>(got - tokens));
    else p.append(static_cast<std::size_t>(tokens - got), '5');
  }
  throw std::runtime_error("cannot make a prompt of " + std::to_string(tokens) + " tokens");
}

}  // namespace

json live_migration(const live_migration_options& o) {
  catch_interrupts();
  const fs::path dir = fs::path(o.work_dir) / ("live-" + std::to_string(std::hash<std::string>{}(o.tls) % 100000) + (o.encrypt ? "-sealed" : "-clear"));
  json out;
  {  // Canvas moves of the shipped model at a refresh boundary.
    owned_cluster c(write_config(dir / "canvas", o.model, o.tls, o.encrypt, "auto", 16, 8), (dir / "canvas" / "state").string(), slo_scale);
    rt::cluster_session s(rt::find_cluster(c.state_dir(), "", ""));
    for (int i = 0; i < o.canvas_moves; ++i) {
      throw_if_interrupted();
      move_one(s, c.state_dir(), "A8341.+962.....=", "boundary");
    }
    std::vector<double> all, resumed;
    for (auto& [rows, v] : settled(s, "canvas", static_cast<std::size_t>(o.canvas_moves)))
      all.insert(all.end(), v.begin(), v.end());
    for (auto& [rows, v] : settled(s, "canvas", static_cast<std::size_t>(o.canvas_moves), 2))
      resumed.insert(resumed.end(), v.begin(), v.end());
    out["canvas_move_ms"] = summary(all);
    // Until the destination's first step starts: the time the request is stopped, without the
    // step it would have taken at the source too.
    out["canvas_resume_ms"] = summary(resumed);
    c.stop();
  }
  const auto big = write_random_model(dir / "model-d512", o.model, big_d_model, big_layers, big_max_seq);
  auto tok = gpu::load_tokenizer(big);
  std::map<int, json> by_length;
  for (const std::string way : {"transfer", "rebuild"}) {
    owned_cluster c(write_config(dir / way, big, o.tls, o.encrypt, way, big_block, big_block), (dir / way / "state").string(), slo_scale);
    rt::cluster_session s(rt::find_cluster(c.state_dir(), "", ""));
    for (int L : o.lengths)
      for (int i = 0; i < o.midblock_moves; ++i) {
        throw_if_interrupted();
        move_one(s, c.state_dir(), prompt_of(*tok, L - big_block), "mid-block");
      }
    const auto moves = static_cast<std::size_t>(o.midblock_moves) * o.lengths.size();
    for (auto& [rows, v] : settled(s, way, moves))
      by_length[rows][way == "transfer" ? "transfer_ms" : "recompute_ms"] = summary(v);
    if (way == "transfer")
      out["policy_crossover"] = policy_crossover(c.state_dir(), o.tls, gpu::load_model_config(big + "/config.json"), big_block);
    // A transfer that failed and was rebuilt shows under "rebuild": none expected.
    if (way == "transfer")
      for (auto& [rows, v] : downtimes(s, "rebuild")) by_length[rows]["transfer_fell_back"] = v.size();
    c.stop();
  }
  out["midblock"] = json::array();
  for (auto& [rows, j] : by_length) {
    j["L"] = rows;
    out["midblock"].push_back(j);
  }
  return out;
}

}  // namespace dls::cli
