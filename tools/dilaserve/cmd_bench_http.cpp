// `dilaserve bench-http`: the HTTP gateway's cost, measured on a running cluster.
// (1) Overhead: the same prompts, one at a time, alternately through the CAF client path
// (what `submit` does) and through POST /v1/completions on a kept-alive connection; the
// medians of both client-observed latencies and of their paired difference.
// (2) Streaming: streamed requests one at a time over SSE, the way `vllm bench serve`
// measures: time to the first committed block, whole-answer latency, SLO attainment.
// (3) Throughput: C clients posting completions back to back for S seconds, each on its
// own kept-alive connection, and then the same through C CAF clients; answered requests
// per second and errors of each.
#include "dilaserve/cluster_flags.hpp"
#include "dilaserve/command_registry.hpp"
#include "dilaserve/median.hpp"
#include "gpu/eval_set.hpp"
#include "runtime/cluster_config.hpp"
#include "runtime/state_dir.hpp"

#include <caf/all.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

namespace rt = dls::runtime;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;
using dls::cli::median;

namespace {

struct bench_http_options {
  dls::cli::cluster_flags cluster;
  int requests = 300;
  int clients = 16;
  double seconds = 10;
  int stream_requests = 100;
  int slo_ms = 0;
  std::string out_json;
};

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

struct http_target {
  std::string host;
  int port = 0;
  std::string key;
  std::string model;
};

std::unique_ptr<httplib::Client> connect(const http_target& t) {
  auto c = std::make_unique<httplib::Client>(t.host, t.port);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);  // as curl and common HTTP clients do
  c->set_read_timeout(std::chrono::seconds(60));
  c->set_default_headers({{"Authorization", "Bearer " + t.key}});
  return c;
}

std::string body_for(const http_target& t, const dls::gpu::eval_problem& p) {
  json j{{"model", t.model}, {"prompt", p.prompt}};
  if (p.gen_length > 0) j["gen_length"] = p.gen_length;
  return j.dump();
}

// One completion over HTTP: true when it was answered with 200.
bool post(httplib::Client& c, const std::string& body) {
  auto r = c.Post("/v1/completions", body, "application/json");
  return r && r->status == 200;
}

struct streamed {
  bool ok = false;
  double first_block_ms = 0;  // to the first `data: {` event
  double total_ms = 0;        // to the end of the stream
};

// One streamed completion, as an SSE client sees it.
streamed stream_once(httplib::Client& c, const http_target& t, const dls::gpu::eval_problem& p, int slo_ms) {
  json j{{"model", t.model}, {"prompt", p.prompt}, {"stream", true}};
  if (p.gen_length > 0) j["gen_length"] = p.gen_length;
  if (slo_ms > 0) j["slo_ms"] = slo_ms;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = j.dump();
  streamed out;
  std::string seen;
  bool done = false;
  auto t0 = clock_type::now();
  req.content_receiver = [&](const char* data, std::size_t len, uint64_t, uint64_t) {
    if (out.first_block_ms == 0) {
      seen.append(data, len);
      if (seen.find("data: {") != std::string::npos) out.first_block_ms = ms_since(t0);
    }
    if (std::string(data, len).find("data: [DONE]") != std::string::npos) done = true;
    return true;
  };
  auto r = c.send(req);
  out.total_ms = ms_since(t0);
  out.ok = r && r->status == 200 && done;
  return out;
}

bool submit_caf(caf::scoped_actor& self, const rt::head_actor& head, const dls::gpu::eval_problem& p) {
  rt::submit_spec spec;
  spec.prompt = p.prompt;
  spec.gen_length = p.gen_length;
  bool ok = false;
  self->request(head, std::chrono::seconds(60), rt::submit_atom::value, spec)
      .receive([&](const rt::answer& a) { ok = a.ok; }, [&](const caf::error&) { ok = false; });
  return ok;
}

int run_bench_http(const bench_http_options& o) {
  auto where = o.cluster.find();
  auto st = rt::load_state(rt::resolve_state_dir(o.cluster.state_dir));
  if (st.http_port <= 0) throw std::runtime_error("the cluster recorded in the state directory has no HTTP gateway");
  auto cfg = rt::load_cluster_config(st.config_file);
  http_target t{st.http_host, st.http_port, cfg.http.api_keys.at(0),
                std::filesystem::path(cfg.model_path).filename().string()};
  auto problems = dls::gpu::load_eval_set(cfg.model_path + "/eval.jsonl");
  if (problems.empty()) throw std::runtime_error("the model's eval set is empty");

  rt::cluster_session session(where);
  caf::scoped_actor self{session.system()};
  auto client = connect(t);
  // Warm both paths (connections, first allocations) before measuring.
  for (int i = 0; i < 10; ++i) {
    submit_caf(self, session.head(), problems[static_cast<std::size_t>(i) % problems.size()]);
    post(*client, body_for(t, problems[static_cast<std::size_t>(i) % problems.size()]));
  }
  std::vector<double> caf_ms, http_ms, diff_ms;
  int errors = 0;
  for (int i = 0; i < o.requests; ++i) {
    const auto& p = problems[static_cast<std::size_t>(i) % problems.size()];
    // Alternate which path goes first, so neither always runs on a warmer cache.
    double a = 0, b = 0;
    for (int k = 0; k < 2; ++k) {
      auto t0 = clock_type::now();
      if ((k == 0) == (i % 2 == 0)) {
        errors += submit_caf(self, session.head(), p) ? 0 : 1;
        a = ms_since(t0);
      } else {
        errors += post(*client, body_for(t, p)) ? 0 : 1;
        b = ms_since(t0);
      }
    }
    caf_ms.push_back(a);
    http_ms.push_back(b);
    diff_ms.push_back(b - a);
  }

  // The same load through both paths, so the ratio shows what the gateway costs at
  // saturation (the CAF clients share one client actor system, as `submit` does).
  auto sustained = [&](bool http) {
    std::atomic<int> answered{0}, failed{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    auto t0 = clock_type::now();
    for (int c = 0; c < o.clients; ++c)
      threads.emplace_back([&, c] {
        std::unique_ptr<httplib::Client> cl;
        std::unique_ptr<caf::scoped_actor> actor;
        if (http) cl = connect(t);
        else actor = std::make_unique<caf::scoped_actor>(session.system());
        for (std::size_t i = static_cast<std::size_t>(c); !stop; i += static_cast<std::size_t>(o.clients)) {
          const auto& p = problems[i % problems.size()];
          bool ok = http ? post(*cl, body_for(t, p)) : submit_caf(*actor, session.head(), p);
          (ok ? answered : failed)++;
        }
      });
    std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));  // the measured window
    stop = true;
    for (auto& th : threads) th.join();
    double wall = ms_since(t0) / 1000;
    return json{{"clients", o.clients}, {"seconds", wall}, {"answered", answered.load()}, {"errors", failed.load()},
                {"requests_per_s", answered.load() / wall}};
  };
  auto thr_caf = sustained(false);
  auto thr_http = sustained(true);

  // Streamed one at a time: what an SSE client sees, first block and whole answer.
  std::vector<double> first_ms, total_ms;
  int stream_errors = 0, met = 0;
  for (int i = 0; i < o.stream_requests; ++i) {
    auto r = stream_once(*client, t, problems[static_cast<std::size_t>(i) % problems.size()], o.slo_ms);
    if (!r.ok) {
      ++stream_errors;
      continue;
    }
    first_ms.push_back(r.first_block_ms);
    total_ms.push_back(r.total_ms);
    if (o.slo_ms > 0 && r.total_ms <= o.slo_ms) ++met;
  }
  json streaming{{"requests", o.stream_requests},
                 {"errors", stream_errors},
                 {"first_block_p50_ms", median(first_ms)},
                 {"latency_p50_ms", median(total_ms)}};
  if (o.slo_ms > 0) {
    streaming["slo_ms"] = o.slo_ms;
    streaming["attainment"] = total_ms.empty() ? 0.0 : static_cast<double>(met) / static_cast<double>(total_ms.size());
  }

  json report{{"overhead",
               {{"requests", o.requests},
                {"errors", errors},
                {"caf_p50_ms", median(caf_ms)},
                {"http_p50_ms", median(http_ms)},
                {"http_minus_caf_p50_ms", median(diff_ms)}}},
              {"streaming", streaming},
              {"throughput_caf", thr_caf},
              {"throughput_http", thr_http}};
  std::printf("overhead (%d requests, one at a time): CAF client p50 %.3f ms, HTTP p50 %.3f ms, "
              "paired HTTP - CAF p50 %.3f ms, %d errors\n",
              o.requests, median(caf_ms), median(http_ms), median(diff_ms), errors);
  std::printf("streaming (%d requests, one at a time): first block p50 %.3f ms, whole answer p50 %.3f ms, %d errors",
              o.stream_requests, median(first_ms), median(total_ms), stream_errors);
  if (o.slo_ms > 0) std::printf(", SLO %d ms met by %.1f%%", o.slo_ms, 100 * streaming["attainment"].get<double>());
  std::printf("\n");
  for (const auto& [name, r] : {std::pair<const char*, json&>{"CAF", thr_caf}, {"HTTP", thr_http}})
    std::printf("throughput via %s (%d clients, %.1f s): %d answered, %d errors, %.0f requests/s\n", name, o.clients,
                r["seconds"].get<double>(), r["answered"].get<int>(), r["errors"].get<int>(),
                r["requests_per_s"].get<double>());
  if (!o.out_json.empty()) std::ofstream(o.out_json) << report.dump(2) << "\n";
  return errors == 0 && stream_errors == 0 && thr_caf["errors"] == 0 && thr_http["errors"] == 0 ? 0 : 1;
}

dls::cli::register_command reg{"bench-http", [](CLI::App& app) {
  auto* sub = app.add_subcommand("bench-http", "Measure the HTTP gateway: overhead against the CAF client, and req/s");
  auto o = std::make_shared<bench_http_options>();
  o->cluster.add_to(sub);
  sub->add_option("--requests", o->requests, "Sequential requests per path for the overhead")->check(CLI::Range(1, 100000));
  sub->add_option("--clients", o->clients, "Concurrent HTTP clients for the throughput")->check(CLI::Range(1, 1024));
  sub->add_option("--seconds", o->seconds, "Length of the throughput window")->check(CLI::Range(0.1, 3600.0));
  sub->add_option("--stream-requests", o->stream_requests, "Streamed requests, one at a time, for time to first block")
      ->check(CLI::Range(0, 100000));
  sub->add_option("--slo-ms", o->slo_ms, "SLO sent with the streamed requests; reports its attainment (0: none)")
      ->check(CLI::Range(0, 86400000));
  sub->add_option("--json", o->out_json, "Also write the numbers to this JSON file");
  return std::function<int()>([o] { return run_bench_http(*o); });
}};

}  // namespace
