// `dilaserve bench`: replay a window of an LLM trace open loop on a live cluster, each policy
// in turn on the same arrivals, at loads relative to the cluster's measured capacity, with
// prompts and answers from the model's eval set; report in `dilaserve sim`'s schema.
#include "dilaserve/bench_cluster.hpp"
#include "dilaserve/bench_replay.hpp"
#include "dilaserve/bench_workload.hpp"
#include "dilaserve/cluster_flags.hpp"
#include "dilaserve/command_registry.hpp"
#include "dilaserve/progress.hpp"
#include "dilaserve/validators.hpp"
#include "policies/presets.hpp"
#include "runtime/cluster_config.hpp"
#include "runtime/state_dir.hpp"
#include "sim/report.hpp"
#include "sim/trace.hpp"
#include "gpu/tokenizer.hpp"

#include <caf/scoped_actor.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <thread>

namespace rt = dls::runtime;
namespace ds = dls::sim;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct bench_options {
  std::string cluster_file;  // --cluster: start and stop this cluster
  dls::cli::cluster_flags cluster;
  std::string trace;
  double duration_s = 0;
  std::vector<double> loads{1.0};
  double slo_scale = 0;  // 0: the cluster's own
  std::vector<std::string> policies{"static", "deadline", "migration", "dilaserve"};
  double capacity = 0;  // req/s; 0: measure
  int capacity_requests = 400;
  int warmup = 20;
  std::string eval_file;
  bool http = false;
  std::string http_url;  // empty with --http: the gateway the state directory recorded
  std::string api_key_file;
  int connections = 64;
  double timeout_s = 120;
  bool json_out = false;
  std::string out;
  // --provision: policy sets with reconfiguration start each run in the layout `provision`
  // plans from the run's own arrivals (their aggregate statistics), as the simulator boots
  // them. Off by default: on this 2-core host it measured worse (docs/performance.md).
  bool provision = false;
};

// The cluster file behind this run: --cluster's, or the one `up` recorded; empty for a bare
// --address.
std::string cluster_file_of(const bench_options& o, const std::string& state_dir) {
  if (!o.cluster_file.empty()) return o.cluster_file;
  if (!o.cluster.address.empty()) return {};
  return rt::load_state(rt::resolve_state_dir(state_dir)).config_file;
}

json head_status(rt::cluster_session& s) {
  caf::scoped_actor self{s.system()};
  std::string text, failure;
  self->request(s.head(), std::chrono::seconds(30), rt::status_atom::value)
      .receive([&](std::string& t) { text = std::move(t); },
               [&](const caf::error& e) { failure = s.system().render(e); });
  if (!failure.empty()) throw std::runtime_error("status: " + failure);
  return json::parse(text);
}

void set_policy(rt::cluster_session& s, const std::string& name) {
  caf::scoped_actor self{s.system()};
  std::string text, failure;
  self->request(s.head(), std::chrono::seconds(30), rt::policy_atom::value, name, s.credential())
      .receive([&](std::string& t) { text = std::move(t); },
               [&](const caf::error& e) { failure = s.system().render(e); });
  if (!failure.empty()) throw std::runtime_error("policy set " + name + ": " + failure);
  auto j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.value("ok", false))
    throw std::runtime_error("policy set " + name + ": " + (j.is_object() ? j.value("error", text) : text));
}

// A figure of every group's `status` row, summed ("steps", "step_wall_s"). A regroup's new
// groups start from zero, so compare runs without one.
double groups_sum(const json& status, const char* key) {
  double s = 0;
  if (status.contains("groups") && status["groups"].is_array())
    for (const auto& g : status["groups"]) s += g.value(key, 0.0);
  return s;
}

uint64_t regroups_of(const json& status) {
  if (status.contains("reconfigurer") && status["reconfigurer"].is_object())
    return status["reconfigurer"].value("regroups", uint64_t{0});
  return 0;
}

// Each node's TP degrees, largest first, as `status` lists the groups.
std::map<std::string, std::vector<int32_t>> layout_of(const json& status) {
  std::map<std::string, std::vector<int32_t>> out;
  if (status.contains("groups") && status["groups"].is_array())
    for (const auto& g : status["groups"]) out[g.value("node", "")].push_back(g.value("degree", 1));
  for (auto& [node, degrees] : out) std::sort(degrees.begin(), degrees.end(), std::greater<int32_t>());
  return out;
}

// Puts every node back to the layout the bench started with, so that each run starts from the
// same groups whatever a reconfiguring policy did in the run before. Called after the next
// policy set is in force, so the reconfigurer starts no regroup of its own unless that set
// reconfigures; one it started before is waited for.
void restore_layout(rt::cluster_session& s, const std::map<std::string, std::vector<int32_t>>& want,
                    const std::string& next_policy) {
  auto degrees_text = [](const std::vector<int32_t>& d) {
    std::string t;
    for (auto x : d) t += (t.empty() ? "" : ",") + std::to_string(x);
    return t;
  };
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    const auto status = head_status(s);
    const bool busy = status.contains("reconfigurer") && status["reconfigurer"].value("busy", false);
    auto now = layout_of(status);
    if (!busy && now == want) return;
    if (std::chrono::steady_clock::now() > until)
      throw std::runtime_error(busy ? "a regroup did not finish within 60 s" : "the layout did not come back within 60 s");
    if (busy) {
      // No event reaches a client when a regroup ends: look at the reconfigurer again shortly.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    for (const auto& [node, degrees] : want) {
      if (now[node] == degrees) continue;
      caf::scoped_actor self{s.system()};
      std::string text, failure;
      self->request(s.head(), std::chrono::minutes(2), rt::regroup_atom::value, rt::regroup_spec{node, degrees},
                    s.credential())
          .receive([&](std::string& t) { text = std::move(t); },
                   [&](const caf::error& e) { failure = s.system().render(e); });
      auto j = json::parse(text, nullptr, false);
      if (!failure.empty() || !j.is_object() || !j.value("ok", false))
        throw std::runtime_error("cannot put node " + node + " back to groups " + degrees_text(degrees) + ": " +
                                 (failure.empty() ? (j.is_object() ? j.value("error", text) : text) : failure));
      std::fprintf(stderr, "bench: node %s put back to groups %s (was %s) before %s\n", node.c_str(),
                   degrees_text(degrees).c_str(), degrees_text(now[node]).c_str(), next_policy.c_str());
    }
  }
}

// `provision` with a run's arrivals as the history: the layout planned from their aggregate
// statistics, as the simulator boots a reconfiguring policy (docs/performance.md). Returns the
// nodes regrouped.
std::vector<std::string> provision_for_run(rt::cluster_session& s, const std::vector<double>& history) {
  const auto text = s.ask_text("provisioning the run's layout", std::chrono::minutes(5), rt::provision_atom::value,
                               history, s.credential());
  auto j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.value("ok", false))
    throw std::runtime_error("cannot provision the run's layout: " + (j.is_object() ? j.value("error", text) : text));
  std::vector<std::string> nodes;
  for (auto& n : j["regrouped"]) nodes.push_back(n.get<std::string>());
  return nodes;
}

struct client_figures {
  double send_lag_p99_s = 0, latency_p50_s = 0, latency_p99_s = 0, first_block_p50_s = 0, first_block_p99_s = 0;
  std::size_t retried = 0;  // HTTP: sent twice after a connection failed before any response
  double start_unix_s = 0, end_unix_s = 0;  // the replay's span on the system clock (to cut step logs)
};

// One run in sim's schema: attainment over all requests (a failed one is a miss), latencies
// (the cluster's, acceptance to answer), accuracy and tokens per step over the answered ones.
ds::result_row summarize(const std::vector<dls::cli::replay_outcome>& outs, const std::vector<dls::cli::bench_request>& reqs,
                         const std::vector<dls::gpu::eval_problem>& problems, const std::string& policy, double load,
                         double slo_scale, client_figures& client) {
  ds::result_row row;
  row.policy = policy;
  row.load = load;
  row.slo_scale = slo_scale;
  row.requests = outs.size();
  std::vector<double> lat, client_lat, lag, first;
  std::size_t met = 0, correct = 0;
  double tokens = 0, steps = 0;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const auto& o = outs[i];
    lag.push_back(o.send_lag_s);
    client.retried += o.retried;
    if (!o.ok) {
      ++row.dropped;
      continue;
    }
    lat.push_back(o.latency_s);
    client_lat.push_back(o.client_latency_s);
    if (o.first_block_s > 0) first.push_back(o.first_block_s);
    met += o.slo_met;
    correct += problems[reqs[i].problem].accepts(o.text);
    tokens += o.tokens;
    steps += o.steps;
    row.migrations += static_cast<uint64_t>(o.moves);
  }
  for (auto* v : {&lat, &client_lat, &lag, &first}) std::sort(v->begin(), v->end());
  const double n = static_cast<double>(lat.size());
  row.slo_attainment = row.requests ? static_cast<double>(met) / static_cast<double>(row.requests) : 0.0;
  double sum = 0;
  for (double x : lat) sum += x;
  row.mean_latency_s = n > 0 ? sum / n : 0.0;
  row.p50_latency_s = ds::nearest_rank(lat, 50);
  row.p90_latency_s = ds::nearest_rank(lat, 90);
  row.p99_latency_s = ds::nearest_rank(lat, 99);
  row.accuracy = n > 0 ? static_cast<double>(correct) / n : 0.0;
  row.tokens_per_step = steps > 0 ? tokens / steps : 0.0;
  client.send_lag_p99_s = ds::nearest_rank(lag, 99);
  client.latency_p50_s = ds::nearest_rank(client_lat, 50);
  client.latency_p99_s = ds::nearest_rank(client_lat, 99);
  client.first_block_p50_s = ds::nearest_rank(first, 50);
  client.first_block_p99_s = ds::nearest_rank(first, 99);
  return row;
}

// The replayed requests as a trace `dilaserve sim --trace` reads, so that the simulator replays
// the same arrivals at each load with `--rate CAPACITY --load L` (tools/sim_vs_live.sh): trace
// seconds, prompt tokens, the canvas's answer tokens (GeneratedTokens: every step costs all of
// them) and the tokens decoded (DecodedTokens: a decode ends with the block in which the
// answer's EOS is committed, so a short answer under a long gen_length decodes one block), the
// latter from the answers of the first run (`first`).
// Each request's prompt tokens (the model's tokenizer) and canvas answer length.
std::vector<std::pair<int, int>> request_shapes(const std::vector<dls::cli::bench_request>& reqs,
                                                const std::vector<dls::gpu::eval_problem>& problems,
                                                const rt::cluster_config& cfg) {
  const auto tok = dls::gpu::load_tokenizer(cfg.model_path);
  std::vector<std::pair<int, int>> out;
  out.reserve(reqs.size());
  for (const auto& r : reqs) {
    const auto& p = problems[r.problem];
    out.push_back({static_cast<int>(tok->encode(p.prompt).size()),
                   p.gen_length > 0 ? p.gen_length : cfg.engine.decode.gen_length});
  }
  return out;
}

void write_arrivals(const std::string& path, const std::vector<dls::cli::bench_request>& reqs,
                    const std::vector<std::pair<int, int>>& shapes,
                    const std::vector<dls::cli::replay_outcome>& first) {
  std::ofstream out(path);
  out << "TIMESTAMP,ContextTokens,GeneratedTokens,DecodedTokens\n";
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    const int gen = shapes[i].second;
    // The canvas holds all of gen; the decode ends with the block of the answer's EOS, and the
    // tokens an answer reports are those its canvas committed: whole blocks up to that one.
    // Without an answer, the whole canvas.
    const int decoded =
        i < first.size() && first[i].ok && first[i].tokens > 0 ? std::clamp(first[i].tokens, 1, gen) : gen;
    out << reqs[i].t << ',' << shapes[i].first << ',' << gen << ',' << decoded << '\n';
  }
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string first_error(const std::vector<dls::cli::replay_outcome>& outs) {
  for (const auto& o : outs)
    if (!o.ok) return o.error;
  return {};
}

int run_bench(const bench_options& o) {
  for (const auto& p : o.policies) (void)dls::policy::make_policy_set(p);  // typos fail before anything starts
  if (!o.cluster_file.empty() && !o.cluster.address.empty())
    throw std::runtime_error("give --cluster FILE (the bench starts it) or --address (a running cluster), not both");
  if (!o.cluster_file.empty()) (void)rt::load_cluster_config(o.cluster_file);  // its errors, before starting
  const auto rows = ds::load_azure_csv(o.trace);

  // The owned cluster's state directory: --state-dir, or a fresh one removed after a clean run.
  std::string state_dir = o.cluster.state_dir;
  bool temp_state = false;
  if (!o.cluster_file.empty() && state_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "dilaserve-bench-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("cannot make a state directory in " + tmpl);
    state_dir = tmpl;
    temp_state = true;
  }
  const auto config_file = cluster_file_of(o, state_dir);
  std::optional<rt::cluster_config> cfg;
  if (!config_file.empty()) cfg = rt::load_cluster_config(config_file);
  const auto eval_file = !o.eval_file.empty() ? o.eval_file
                         : cfg                ? cfg->model_path + "/eval.jsonl"
                                              : throw std::runtime_error("--address without a cluster file: give --eval-file");
  const auto problems = dls::gpu::load_eval_set(eval_file);
  const auto reqs = dls::cli::map_trace(rows, o.duration_s, problems);

  dls::cli::catch_interrupts();
  const double slo_scale = o.slo_scale > 0 ? o.slo_scale : cfg ? cfg->scheduler.slo_scale : 0.0;
  std::unique_ptr<dls::cli::owned_cluster> owned;
  if (!o.cluster_file.empty()) {
    if (!o.json_out) std::printf("starting %s (state %s)\n", o.cluster_file.c_str(), state_dir.c_str());
    owned = std::make_unique<dls::cli::owned_cluster>(o.cluster_file, state_dir, slo_scale);
  }
  const auto where = owned ? rt::address_of(rt::load_state(state_dir))
                           : rt::find_cluster(state_dir, o.cluster.address, o.cluster.token_file, o.cluster.tls_dir,
                                              o.cluster.insecure);
  rt::cluster_session session(where);
  const auto status0 = head_status(session);
  const double cluster_scale = status0.value("slo_scale", 0.0);
  if (o.slo_scale > 0 && std::fabs(cluster_scale - o.slo_scale) > 1e-9)
    throw std::runtime_error("the cluster derives deadlines with scheduler.slo_scale " + std::to_string(cluster_scale) +
                             ", not --slo-scale " + std::to_string(o.slo_scale) +
                             " (start it with `dilaserve up --slo-scale`, or let the bench start it with --cluster)");

  // The path requests take: CAF (what `submit` does) or the gateway's OpenAI API.
  std::optional<dls::cli::http_endpoint> ep;
  if (o.http) {
    if (!o.http_url.empty()) {
      ep = dls::cli::parse_http_url(o.http_url);
    } else {
      const auto st = rt::load_state(rt::resolve_state_dir(state_dir));
      if (st.http_port <= 0) throw std::runtime_error("--http: the cluster has no HTTP gateway (no http: section)");
      ep = dls::cli::http_endpoint{st.http_host, st.http_port, "/v1", "", ""};
    }
    if (!o.api_key_file.empty()) {
      ep->key = rt::read_token(o.api_key_file);
    } else if (cfg && !cfg->http.api_keys.empty()) {
      ep->key = cfg->http.api_keys.front();
    } else {
      throw std::runtime_error("--http: give --api-key-file (no cluster file with http.api_keys_file here)");
    }
    httplib::Client c(ep->host, ep->port);
    c.set_connection_timeout(std::chrono::seconds(10));
    c.set_read_timeout(std::chrono::seconds(30));
    auto r = c.Get(ep->base_path + "/models", {{"Authorization", "Bearer " + ep->key}});
    if (!r) throw std::runtime_error("--http: cannot reach " + ep->host + ":" + std::to_string(ep->port) + " (" +
                                     httplib::to_string(r.error()) + ")");
    auto j = json::parse(r->body, nullptr, false);
    if (r->status != 200 || !j.is_object() || !j.contains("data") || j["data"].empty())
      throw std::runtime_error("--http: GET " + ep->base_path + "/models answered " + std::to_string(r->status));
    ep->model = j["data"][0].value("id", "");
  }
  auto replay = [&](const dls::cli::replay_plan& plan) {
    return ep ? dls::cli::replay_http(*ep, plan, problems, o.connections) : dls::cli::replay_caf(session, plan, problems);
  };
  // The same requests with every arrival at 0 (warm-up and the capacity burst).
  auto burst = [&](std::size_t n) {
    std::vector<dls::cli::bench_request> b;
    for (std::size_t i = 0; i < n; ++i) b.push_back({0.0, reqs[i % reqs.size()].problem});
    return b;
  };

  const double raw_rate = dls::cli::window_rate(reqs);
  const std::size_t runs = o.loads.size() * o.policies.size();
  std::size_t total = runs * reqs.size() + static_cast<std::size_t>(o.warmup) +
                      (o.capacity > 0 ? 0 : static_cast<std::size_t>(o.capacity_requests));
  dls::cli::progress_bar bar("bench", total, !o.json_out);
  auto tick = [&] { bar.advance(1); };

  set_policy(session, "static");
  const auto first_status = head_status(session);
  const auto initial_layout = layout_of(first_status);
  // The path overhead per request the head measured at startup; its deadlines count it.
  const double path_ms = first_status.value("slo_request_overhead_ms", 0.0);
  std::fprintf(stderr, "bench: deadlines count %.3f ms of path overhead per request\n", path_ms);
  // Each request's prompt tokens and answer length: the runs' provisioning histories and
  // arrivals.csv.
  std::vector<std::pair<int, int>> shapes;
  if (cfg) shapes = request_shapes(reqs, problems, *cfg);
  if (o.provision && !cfg && !o.json_out) {
    std::printf("no cluster file to tokenize with: reconfiguring policies start from the running layout\n");
  }
  if (o.warmup > 0) replay({burst(static_cast<std::size_t>(o.warmup)), 0.0, o.timeout_s, tick});
  double capacity = o.capacity;
  if (capacity <= 0) {
    // What the cluster sustains, saturated, FCFS at the engine's tau: every request at once.
    bar.advance(0, "measuring capacity");
    const auto t0 = std::chrono::steady_clock::now();
    auto outs = replay({burst(static_cast<std::size_t>(o.capacity_requests)), 0.0, o.timeout_s, tick});
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto failed = static_cast<std::size_t>(std::count_if(outs.begin(), outs.end(), [](auto& x) { return !x.ok; }));
    if (failed) throw std::runtime_error("capacity burst: " + std::to_string(failed) + " requests failed (" + first_error(outs) + ")");
    capacity = static_cast<double>(outs.size()) / wall;
  }
  if (!o.json_out)
    std::printf("%zu requests from the first %.0f s of %s (%.2f req/s in the trace); capacity %.1f req/s (%s); "
                "SLO = %.2g x solo latency; via %s\n",
                reqs.size(), o.duration_s, o.trace.c_str(), raw_rate, capacity,
                o.capacity > 0 ? "--capacity" : "measured, static", slo_scale,
                ep ? ("HTTP " + ep->host + ":" + std::to_string(ep->port)).c_str() : "CAF");

  std::vector<ds::result_row> results;
  std::vector<client_figures> clients;
  std::vector<dls::cli::replay_outcome> first_outs;  // the first run's answers (arrivals.csv)
  std::vector<ds::request_row> request_log;           // every request of every run (requests.csv)
  for (double load : o.loads) {
    // Arrival times scaled so the mean rate is load x capacity; the arrival pattern is kept.
    const double time_scale = raw_rate / (load * capacity);
    for (const auto& pname : o.policies) {
      set_policy(session, pname);
      restore_layout(session, initial_layout, pname);
      if (o.provision && !shapes.empty() && dls::policy::make_policy_set(pname).reconfigure) {
        std::vector<double> history;
        for (std::size_t i = 0; i < reqs.size(); ++i) {
          history.push_back(reqs[i].t * time_scale);
          history.push_back(shapes[i].first);
          history.push_back(shapes[i].second);
        }
        for (const auto& node : provision_for_run(session, history))
          std::fprintf(stderr, "bench: node %s provisioned for %s at load %.2f\n", node.c_str(), pname.c_str(), load);
      }
      bar.advance(0, pname + " load " + std::to_string(load).substr(0, 4));
      const auto before = head_status(session);
      const auto t0 = std::chrono::steady_clock::now();
      const auto unix0 = std::chrono::system_clock::now();
      auto outs = replay({reqs, time_scale, o.timeout_s, tick});
      const auto unix1 = std::chrono::system_clock::now();
      if (first_outs.empty()) first_outs = outs;
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const auto after = head_status(session);
      client_figures cf;
      auto row = summarize(outs, reqs, problems, pname, load, slo_scale, cf);
      cf.start_unix_s = std::chrono::duration<double>(unix0.time_since_epoch()).count();
      cf.end_unix_s = std::chrono::duration<double>(unix1.time_since_epoch()).count();
      row.reconfigurations = regroups_of(after) - std::min(regroups_of(after), regroups_of(before));
      row.stats.wall_s = wall;
      row.stats.virtual_end_s = wall;  // live: the replay's own clock is the wall clock
      row.stats.group_steps =
          static_cast<uint64_t>(std::max(0.0, groups_sum(after, "steps") - groups_sum(before, "steps")));
      row.stats.group_busy_s = std::max(0.0, groups_sum(after, "step_wall_s") - groups_sum(before, "step_wall_s"));
      results.push_back(row);
      clients.push_back(cf);
      for (std::size_t i = 0; i < outs.size(); ++i)
        request_log.push_back({pname, load, slo_scale, i, reqs[i].t * time_scale,
                               outs[i].ok ? outs[i].latency_s : -1.0, outs[i].steps, outs[i].ok && outs[i].slo_met});
    }
  }
  bar.finish();

  if (o.json_out) {
    std::cout << ds::results_json(results).dump(2) << "\n";
  } else {
    std::cout << ds::results_table(results);
    std::printf("\nclient side (ms): p99 of how late requests were sent, client-observed latency p50/p99%s\n",
                ep ? ", time to the first streamed block p50/p99" : "");
    for (std::size_t i = 0; i < results.size(); ++i) {
      std::printf("%-14s %5.2f  lag p99 %8.2f  latency %8.2f %8.2f", results[i].policy.c_str(), results[i].load,
                  1e3 * clients[i].send_lag_p99_s, 1e3 * clients[i].latency_p50_s, 1e3 * clients[i].latency_p99_s);
      if (ep)
        std::printf("  first block %8.2f %8.2f  retried %zu", 1e3 * clients[i].first_block_p50_s,
                    1e3 * clients[i].first_block_p99_s, clients[i].retried);
      std::printf("\n");
    }
  }
  if (!o.out.empty()) {
    fs::create_directories(o.out);
    ds::write_results_csv(o.out + "/results.csv", results);
    ds::write_requests_csv(o.out + "/requests.csv", request_log);
    std::ofstream(o.out + "/results.json") << ds::results_json(results).dump(2) << "\n";
    if (cfg) write_arrivals(o.out + "/arrivals.csv", reqs, shapes, first_outs);
    // What the loads were relative to, for a replay of arrivals.csv in the simulator.
    std::ofstream(o.out + "/bench.json") << json{{"capacity_rps", capacity},
                                                 {"capacity_measured", o.capacity <= 0},
                                                 {"slo_scale", slo_scale},
                                                 {"slo_request_overhead_ms", path_ms},
                                                 {"requests", reqs.size()},
                                                 {"trace_rate_rps", raw_rate},
                                                 {"via", ep ? "http" : "caf"}}
                                                .dump(2)
                                         << "\n";
    std::ofstream client_csv(o.out + "/client.csv");
    client_csv.precision(15);  // unix seconds to the microsecond
    client_csv << "policy,load,send_lag_p99_s,client_latency_p50_s,client_latency_p99_s,first_block_p50_s,"
                  "first_block_p99_s,retried,start_unix_s,end_unix_s\n";
    for (std::size_t i = 0; i < results.size(); ++i)
      client_csv << results[i].policy << ',' << results[i].load << ',' << clients[i].send_lag_p99_s << ','
                 << clients[i].latency_p50_s << ',' << clients[i].latency_p99_s << ','
                 << clients[i].first_block_p50_s << ',' << clients[i].first_block_p99_s << ','
                 << clients[i].retried << ',' << clients[i].start_unix_s << ',' << clients[i].end_unix_s << '\n';
    char scale[32];
    std::snprintf(scale, sizeof scale, "%g", slo_scale);
    std::ofstream(o.out + "/attainment_s" + scale + ".svg") << ds::attainment_svg(results, slo_scale);
    std::ofstream(o.out + "/latency_s" + scale + ".svg") << ds::latency_svg(results, slo_scale);
    if (!o.json_out)
      std::printf("wrote %s/results.csv, requests.csv, results.json, client.csv, bench.json, %sattainment_s%s.svg and latency_s%s.svg\n",
                  o.out.c_str(), cfg ? "arrivals.csv, " : "", scale, scale);
  }
  if (owned) {
    owned->stop();
    if (temp_state) fs::remove_all(state_dir);
  }
  return 0;
}

dls::cli::register_command reg{"bench", [](CLI::App& app) {
  auto* sub = app.add_subcommand("bench", "replay a trace open loop on a live cluster, each policy in turn");
  auto o = std::make_shared<bench_options>();
  sub->add_option("--cluster", o->cluster_file, "cluster YAML to start for the bench and stop afterwards");
  o->cluster.add_to(sub);
  sub->add_option("--trace", o->trace, "Azure LLM trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens)")->required();
  sub->add_option("--duration", o->duration_s, "seconds of the trace to replay, from its start")
      ->required()
      ->check(dls::cli::positive);
  sub->add_option("--load", o->loads, "load multipliers (arrival rate / measured capacity)")
      ->delimiter(',')
      ->check(dls::cli::positive);
  sub->add_option("--slo-scale", o->slo_scale,
                  "deadline = arrival + S x the request's profiled solo latency (default: the cluster's scheduler.slo_scale)")
      ->check(dls::cli::positive);
  sub->add_option("--policies", o->policies, "policies, switched with `policy set` between runs")->delimiter(',');
  sub->add_option("--capacity", o->capacity, "capacity in req/s that --load multiplies (default: measured)")
      ->check(dls::cli::positive);
  sub->add_option("--capacity-requests", o->capacity_requests, "requests in the capacity burst")
      ->check(CLI::Range(1, 1000000));
  sub->add_option("--warmup", o->warmup, "requests sent at once before measuring")->check(CLI::Range(0, 100000));
  sub->add_option("--eval-file", o->eval_file, "eval set with prompts and answers (default: the model's eval.jsonl)");
  sub->add_option("--http", o->http_url,
                  "send requests through the OpenAI-compatible API at http://HOST:PORT[/v1], streamed "
                  "(no URL: the gateway of the state directory's cluster)")
      ->expected(0, 1);
  sub->add_option("--api-key-file", o->api_key_file, "--http: file holding the API key (default: the cluster file's first)");
  sub->add_option("--connections", o->connections, "--http: concurrent connections (each one request at a time)")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--timeout", o->timeout_s, "seconds to wait for answers after a run's last arrival")
      ->check(dls::cli::positive);
  sub->add_flag("--json", o->json_out, "print {\"results\": [...]} only (dilaserve sim's schema)");
  sub->add_flag("--provision", o->provision,
                "start each run of a policy set with reconfiguration in the layout `dilaserve provision` plans from "
                "the run's arrivals, as the simulator boots it (default: the file's layout)");
  sub->add_option("--out", o->out, "directory for results.csv, requests.csv (every request), results.json, client.csv, SVG plots and (with a cluster file) "
                  "arrivals.csv, the requests as a trace for `dilaserve sim`");
  auto* http = sub->get_option("--http");
  return std::function<int()>([o, http] {
    o->http = http->count() > 0;
    return run_bench(*o);
  });
}};

}  // namespace
