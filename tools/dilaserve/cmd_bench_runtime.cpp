// `dilaserve bench-runtime`: the runtime's numbers for docs/performance.md in one run:
// (1) TP=2 vs TP=1 refresh-step time through the worker actors at several lengths,
// (2) actor messaging overhead per step, (3) split/merge time, and (4) throughput of
// two TP=1 groups vs one TP=2 group on a burst, on a real local cluster.
#include "actors/local_messages.hpp"
#include "actors/node_parts.hpp"
#include "dilaserve/bench_cluster.hpp"
#include "dilaserve/cluster_file_copy.hpp"
#include "dilaserve/command_registry.hpp"
#include "dilaserve/median.hpp"
#include "dilaserve/random_model.hpp"
#include "gpu/canvas.hpp"
#include "gpu/model_config.hpp"
#include "gpu/safetensors.hpp"
#include "runtime/caf_setup.hpp"
#include "runtime/client.hpp"
#include "runtime/process.hpp"
#include "runtime/state_dir.hpp"

#include <caf/all.hpp>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <functional>
#include <numeric>
#include <random>

namespace fs = std::filesystem;
namespace rt = dls::runtime;
namespace act = dls::actors;
using dls::cli::median;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

struct bench_options {
  std::string config = "configs/local.yaml";
  std::vector<int> lengths{128, 512, 1024};
  int d_model = 512;
  int layers = 2;
  int reps = 5;
  int burst = 50;
  int live_d_model = 512;
  std::string out_json;
};

// -- (1) TP step time through worker actors ------------------------------------------

struct tp_timing {
  double wall_ms = 0;    // scoped actor -> all k workers -> replies
  double engine_ms = 0;  // slowest rank inside engine::step
};

tp_timing time_refresh(caf::actor_system& sys, std::shared_ptr<const dls::gpu::model> m, int world, int length,
                       int reps) {
  dls::runtime::device_spec cpus;
  cpus.count = world;
  const auto devices = act::device_pool::open(cpus, m);
  std::vector<caf::actor> workers;
  for (int r = 0; r < world; ++r) workers.push_back(act::spawn_worker(sys, devices, r, "bench/w" + std::to_string(r)));
  std::vector<int> slots(static_cast<std::size_t>(world));
  std::iota(slots.begin(), slots.end(), 0);
  auto link = devices->link_for(slots);
  caf::scoped_actor self{sys};
  for (int r = 0; r < world; ++r)
    self->send(workers[static_cast<std::size_t>(r)], act::configure_atom::value, act::shard_setup{r, world, link});
  // cache none: every step is a refresh over the whole canvas.
  dls::gpu::decode_params p;
  p.gen_length = 32;
  p.block_length = 32;
  p.cache = dls::gpu::cache_mode::none;
  p.threshold = 1.0;  // commit one token per step, so the canvas lasts for every rep
  std::mt19937 rng(7);
  std::vector<int32_t> prompt(static_cast<std::size_t>(length - p.gen_length));
  for (auto& t : prompt) t = 2 + static_cast<int32_t>(rng() % static_cast<unsigned>(m->config.vocab_size - 2));
  auto c = dls::gpu::canvas::start(prompt, p, m->config.mask_id, m->config.eos_id);
  for (auto& w : workers) self->send(w, act::admit_atom::value, uint64_t{1}, c.to_bytes());
  std::vector<double> wall, engine;
  for (int i = 0; i <= reps; ++i) {
    auto t0 = clock_type::now();
    for (auto& w : workers) self->send(w, act::step_atom::value, act::step_order{{1}});
    double slowest = 0;
    for (int r = 0; r < world; ++r)
      self->receive([&](act::step_result& res) {
        if (!res.error.empty()) throw std::runtime_error(res.error);
        slowest = std::max(slowest, res.seconds);
      });
    if (i == 0) continue;  // warm-up: first touch of buffers
    wall.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
    engine.push_back(slowest * 1000);
  }
  for (auto& w : workers) self->send_exit(w, caf::exit_reason::user_shutdown);
  return {median(wall), median(engine)};
}

// -- (2)-(4) a live local cluster --------------------------------------------------------

template <class... Ts>
json request(rt::cluster_session& s, Ts&&... xs) {
  caf::scoped_actor self{s.system()};
  json out;
  self->request(s.head(), std::chrono::minutes(5), std::forward<Ts>(xs)...)
      .receive([&](std::string& text) { out = json::parse(text); },
               [&](caf::error& e) { throw std::runtime_error(s.system().render(e)); });
  return out;
}

json list_actors(rt::cluster_session& s) {
  caf::scoped_actor self{s.system()};
  json out = json::array();
  self->request(s.head(), std::chrono::minutes(1), rt::actors_atom::value)
      .receive(
          [&](std::vector<rt::actor_info>& rows) {
            for (auto& r : rows) out.push_back({{"kind", r.kind}, {"state", r.state}, {"details", json::parse(r.details)}});
          },
          [&](caf::error& e) { throw std::runtime_error(s.system().render(e)); });
  return out;
}

// Submits `n` prompts at once; returns wall seconds until the last answer.
// `during`, if set, runs once every request has been sent (e.g. a regroup under load).
double burst(rt::cluster_session& s, const std::vector<std::string>& prompts,
             const std::function<void()>& during = {}) {
  caf::scoped_actor self{s.system()};
  auto t0 = clock_type::now();
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    rt::submit_spec spec;
    spec.prompt = prompts[i];
    spec.tag = i;
    self->send(s.head(), rt::submit_atom::value, spec);
  }
  if (during) during();
  // A burst of the tiny model takes about a second; ten minutes means the cluster stopped serving.
  const auto give_up = t0 + std::chrono::minutes(10);
  std::size_t got = 0;
  while (got < prompts.size()) {
    dls::cli::throw_if_interrupted();
    if (clock_type::now() > give_up)
      throw std::runtime_error("a burst of " + std::to_string(prompts.size()) + " requests got " + std::to_string(got) +
                               " answers in 10 minutes");
    // Short waits, so that Ctrl-C is seen and the cluster stopped.
    self->receive(
        [&](rt::answer& a) {
          if (!a.ok) throw std::runtime_error("request failed: " + a.error);
          ++got;
        },
        caf::after(std::chrono::milliseconds(200)) >> [] {});
  }
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

json group_stats(rt::cluster_session& s) {
  double wall = 0, engine = 0, steps = 0;
  for (auto& a : list_actors(s))
    if (a["kind"] == "tp_group" && a["state"] == "ALIVE") {
      wall += a["details"].value("step_wall_s", 0.0);
      engine += a["details"].value("engine_s", 0.0);
      steps += a["details"].value("steps", 0.0);
    }
  return {{"steps", steps}, {"step_wall_s", wall}, {"engine_s", engine}};
}

// Runs split/merge, throughput and overhead rounds on a fresh cluster serving `model_path`.
int live_cluster(const bench_options& o, YAML::Node root, const std::string& model_path, const std::string& label,
                 const fs::path& dir, json& report) {
  fs::create_directories(dir);
  root["head"]["port"] = 0;
  if (root["http"]) root["http"]["port"] = 0;
  root["model"]["path"] = model_path;
  auto cfg_path = (dir / "bench.yaml").string();
  std::ofstream(cfg_path) << root << "\n";
  auto state = (dir / "state").string();
  dls::cli::catch_interrupts();
  dls::cli::owned_cluster cluster(cfg_path, state, 0);  // stopped when this function leaves
  int rc = 0;
  try {
    auto st = rt::load_state(state);
    rt::cluster_session s(rt::address_of(st));
    auto node = root["nodes"][0]["name"].as<std::string>();
    std::vector<std::string> prompts;
    std::mt19937 rng(3);
    const std::string alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
    for (int i = 0; i < o.burst; ++i) {
      std::string p = "C";
      for (int k = 0; k < 14; ++k) p += alphabet[rng() % alphabet.size()];
      prompts.push_back(p + "=");
    }
    auto regroup = [&](std::vector<int32_t> groups) {
      return request(s, rt::regroup_atom::value, rt::regroup_spec{node, groups}, s.credential());
    };
    std::vector<double> split_ms, merge_ms;
    json thr = json::object();
    for (int round = 0; round < 3; ++round) {
      auto sp = regroup({1, 1});
      if (!sp.value("ok", false)) throw std::runtime_error("split failed: " + sp.dump());
      split_ms.push_back(sp["total_ms"].get<double>());
      double t11 = burst(s, prompts);
      // Every regroup makes fresh groups, so these totals cover exactly one burst.
      auto one = group_stats(s);
      auto mg = regroup({2});
      if (!mg.value("ok", false)) throw std::runtime_error("merge failed: " + mg.dump());
      merge_ms.push_back(mg["total_ms"].get<double>());
      double t2 = burst(s, prompts);
      auto two = group_stats(s);
      thr["tp1x2_rps"].push_back(o.burst / t11);
      thr["tp2_rps"].push_back(o.burst / t2);
      // Overhead: time from sending a step to the workers until the last reply, minus the
      // slowest worker's time inside engine::step, over the former.
      for (auto* g : {&one, &two}) {
        double w = (*g)["step_wall_s"].get<double>(), e = (*g)["engine_s"].get<double>();
        thr[g == &one ? "overhead_tp1" : "overhead_tp2"].push_back(w > 0 ? (w - e) / w : 0.0);
      }
    }
    // A split and a merge while a burst runs: they wait for requests to reach a refresh
    // boundary, so this is the figure that matters for live reconfiguration.
    std::vector<double> busy_ms;
    int moved = 0;
    for (int round = 0; round < 3; ++round)
      for (std::vector<int32_t> groups : {std::vector<int32_t>{1, 1}, std::vector<int32_t>{2}})
        burst(s, prompts, [&] {
          auto r = regroup(groups);
          if (!r.value("ok", false)) throw std::runtime_error("regroup under load failed: " + r.dump());
          busy_ms.push_back(r["total_ms"].get<double>());
          moved += r["node_stats"].value("moved", 0);
        });
    auto med = [&](const json& a) { return median(a.get<std::vector<double>>()); };
    std::printf("\nlive cluster %s with the %s, node %s, burst of %d requests (median of 3 rounds)\n",
                o.config.c_str(), label.c_str(), node.c_str(), o.burst);
    std::printf("  two TP=1 groups: %.2f req/s   one TP=2 group: %.2f req/s   ratio TP=2/(2xTP=1): %.2f\n",
                med(thr["tp1x2_rps"]), med(thr["tp2_rps"]), med(thr["tp2_rps"]) / med(thr["tp1x2_rps"]));
    std::printf("  actor messaging overhead per group step: %.2f%% (TP=1 groups), %.2f%% (TP=2 group) of step time\n",
                100 * med(thr["overhead_tp1"]), 100 * med(thr["overhead_tp2"]));
    std::printf("  split [2]->[1,1]: %.1f ms   merge [1,1]->[2]: %.1f ms (idle cluster, median)\n", median(split_ms),
                median(merge_ms));
    std::printf("  split or merge during a burst: %.1f ms median, %.1f ms max (%d requests moved as canvases)\n",
                median(busy_ms), *std::max_element(busy_ms.begin(), busy_ms.end()), moved);
    report["cluster"].push_back({{"model", label}, {"config", o.config}, {"burst", o.burst},
                         {"tp1x2_rps", med(thr["tp1x2_rps"])}, {"tp2_rps", med(thr["tp2_rps"])},
                         {"overhead_tp1", med(thr["overhead_tp1"])}, {"overhead_tp2", med(thr["overhead_tp2"])}, {"split_ms", median(split_ms)},
                         {"merge_ms", median(merge_ms)}, {"regroup_under_load_ms", median(busy_ms)},
                         {"moved_under_load", moved}});
  } catch (const std::exception& e) {
    std::cerr << "dilaserve: error: bench: " << e.what() << "\n";
    rc = 1;
  }
  return rc;
}


// Positions of the TP comparison's random model (LLaDA-8B's context).
constexpr int tp_max_seq = 4096;

int run_bench(const bench_options& o) {
  json report;
  // (1) TP=2 vs TP=1.
  {
    dls::gpu::model_config mc;
    mc.d_model = o.d_model;
    mc.n_layers = o.layers;
    mc.n_heads = o.d_model / 64;
    mc.n_kv_heads = mc.n_heads;
    mc.mlp_hidden = o.d_model * 11 / 4;
    mc.vocab_size = 1024;
    mc.max_seq = tp_max_seq;
    mc.mask_id = 1;
    mc.eos_id = 0;
    auto m = dls::gpu::make_random_model(mc, 1);
    caf::actor_system_config cfg;
    rt::configure_caf(cfg, {});
    caf::actor_system sys{cfg};
    report["tp"] = json::array();
    std::printf("refresh step, LLaDA-shaped random model d=%d layers=%d heads=%d mlp=%d (median of %d)\n", mc.d_model,
                mc.n_layers, mc.n_heads, mc.mlp_hidden, o.reps);
    std::printf("  %-6s %12s %12s %8s %14s\n", "length", "TP=1 ms", "TP=2 ms", "speedup", "msg overhead");
    for (int len : o.lengths) {
      auto t1 = time_refresh(sys, m, 1, len, o.reps);
      auto t2 = time_refresh(sys, m, 2, len, o.reps);
      double overhead = (t2.wall_ms - t2.engine_ms) / t2.wall_ms;
      std::printf("  %-6d %12.1f %12.1f %7.2fx %13.2f%%\n", len, t1.wall_ms, t2.wall_ms, t1.wall_ms / t2.wall_ms,
                  100 * overhead);
      report["tp"].push_back({{"length", len}, {"tp1_ms", t1.wall_ms}, {"tp2_ms", t2.wall_ms},
                              {"speedup", t1.wall_ms / t2.wall_ms}, {"tp2_engine_ms", t2.engine_ms}});
    }
  }
  // (2)-(4) on live clusters: the shipped model, then a random LLaDA-shaped one whose
  // steps are long enough for messaging overhead to be measured against real work.
  fs::path dir = fs::temp_directory_path() / ("dls-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto root = dls::cli::cluster_file_with_absolute_paths(o.config);
  const auto shipped = root["model"]["path"].as<std::string>();
  int rc = 0;
  report["cluster"] = json::array();
  try {
    rc |= live_cluster(o, root, shipped, "shipped tiny model", dir / "a", report);
    if (o.live_d_model > 0) {
      auto big = dls::cli::write_random_model(dir / "model", shipped, o.live_d_model, o.layers);
      rc |= live_cluster(o, root, big, "random model d=" + std::to_string(o.live_d_model), dir / "b", report);
    }
  } catch (const std::exception& e) {
    std::cerr << "dilaserve: error: bench: " << e.what() << "\n";
    rc = 1;
  }
  fs::remove_all(dir);
  if (!o.out_json.empty()) std::ofstream(o.out_json) << report.dump(2) << "\n";
  return rc;
}

dls::cli::register_command reg{"bench-runtime", [](CLI::App& app) {
  auto* sub = app.add_subcommand("bench-runtime", "Measure TP speedup, actor overhead, split/merge time, throughput");
  auto o = std::make_shared<bench_options>();
  sub->add_option("--config", o->config, "Cluster file for the live part (its first node is regrouped)");
  sub->add_option("--lengths", o->lengths, "Sequence lengths for the TP comparison");
  sub->add_option("--d-model", o->d_model, "d_model of the random LLaDA-shaped model")->check(CLI::Range(128, 8192));
  sub->add_option("--layers", o->layers, "Layers of the random model")->check(CLI::Range(1, 64));
  sub->add_option("--reps", o->reps, "Measured steps per point")->check(CLI::Range(1, 100));
  sub->add_option("--burst", o->burst, "Requests per throughput burst")->check(CLI::Range(1, 10000));
  sub->add_option("--live-d-model", o->live_d_model, "Also run the live part on a random model this wide (0: skip)")
      ->check(CLI::Range(0, 8192));
  sub->add_option("--json", o->out_json, "Also write the numbers to this JSON file");
  return std::function<int()>([o] {
    for (int len : o->lengths)
      if (len < 1 || len > tp_max_seq)
        throw std::invalid_argument("--lengths: " + std::to_string(len) + " is outside [1, " + std::to_string(tp_max_seq) +
                                    "], the random model's positions");
    return run_bench(*o);
  });
}};

}  // namespace
