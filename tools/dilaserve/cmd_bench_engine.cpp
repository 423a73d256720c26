// dilaserve bench-engine: the CPU engine against its own ceiling, in one run.
//   1. OpenBLAS sgemm GFLOP/s at the layer shapes of each sequence length (the ceiling);
//   2. engine forward GFLOP/s for a refresh and a dual-cache reuse step on a LLaDA-shaped
//      random model, and the measured refresh/reuse time ratio beside its FLOP ratio;
//   3. TP=2 against TP=1 refresh step time (shared-memory all-reduce across two slots);
//   4. tokens/s of the shipped model for tau in {0.7, 0.9, one-per-step} x cache {none, dual};
//   5. one pass of a block's rows over every weight of the random model, the packed small-M
//      kernel against OpenBLAS (what a reuse step's products cost either way);
//   6. a layer-split refresh, one layer per step, summed, against the whole refresh (the step-cost
//      model charges a range its share of the layers).
#include "dilaserve/command_registry.hpp"
#include "dilaserve/median.hpp"
#include "dilaserve/validators.hpp"
#include "gpu/cpu_backend.hpp"
#include "gpu/cpu_kernels.hpp"
#include "gpu/cpu_packed_gemm.hpp"
#include "gpu/engine.hpp"
#include "gpu/eval_set.hpp"
#include "gpu/model.hpp"
#include "gpu/tokenizer.hpp"
#include "gpu/tp_runner.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

namespace dls::cli {
namespace {

using clock_type = std::chrono::steady_clock;

struct bench_options {
  std::string model = "models/tiny-llada";
  int d_model = 512;
  int layers = 4;
  int heads = 8;
  int vocab = 8192;
  int block = 32;
  std::vector<int> lengths{128, 512, 1024};
  int reps = 7;
  int problems = 96;
  bool skip_tp = false;
  bool json = false;
};

template <class F>
double seconds_of(F&& f) {
  auto t0 = clock_type::now();
  f();
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

template <class F>
double median_seconds(int reps, F&& f) {
  f();  // warm-up: first-touch of buffers and caches
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = clock_type::now();
    f();
    t.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// FLOPs of one forward over `q` query rows against `k` key rows, plus the head on `head_rows`.
double step_flops(const gpu::model_config& c, double q, double k, double head_rows) {
  double d = c.d_model, kv = c.kv_dim(), ff = c.mlp_hidden;
  double per_layer = 2 * q * (2 * d * d + 2 * d * kv + 3 * d * ff) + 4 * q * k * d;
  return c.n_layers * per_layer + 2 * head_rows * d * c.vocab_size;
}

// The GEMMs of one layer at M = rows, timed back to back: the ceiling the engine can reach.
double sgemm_ceiling(const gpu::model_config& c, int rows, int reps) {
  const int d = c.d_model, ff = c.mlp_hidden;
  std::mt19937 g(1);
  std::normal_distribution<float> nd(0, 1);
  auto fill = [&](std::size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = nd(g);
    return v;
  };
  auto x = fill(std::size_t(rows) * ff), w1 = fill(std::size_t(d) * d), w2 = fill(std::size_t(ff) * d),
       w3 = fill(std::size_t(d) * ff);
  std::vector<float> y(std::size_t(rows) * ff);
  double secs = median_seconds(reps, [&] {
    for (int i = 0; i < 4; ++i) gpu::cpu::matmul_xwt(x.data(), rows, d, d, w1.data(), d, d, y.data(), d);
    for (int i = 0; i < 2; ++i) gpu::cpu::matmul_xwt(x.data(), rows, d, d, w2.data(), ff, d, y.data(), ff);
    gpu::cpu::matmul_xwt(x.data(), rows, ff, ff, w3.data(), d, ff, y.data(), d);
  });
  double flops = 2.0 * rows * (4.0 * d * d + 3.0 * d * ff);
  return flops / secs / 1e9;
}

gpu::canvas bench_canvas(const gpu::model_config& c, int length, int block, bool reuse) {
  gpu::decode_params p;
  p.gen_length = block;
  p.block_length = block;
  p.cache = gpu::cache_mode::dual;
  std::vector<int32_t> prompt(static_cast<std::size_t>(length - block));
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(2 + (i * 31) % (c.vocab_size - 2));
  auto cv = gpu::canvas::start(prompt, p, c.mask_id, c.eos_id);
  if (reuse) cv.step_in_block = 1;  // the next step of this block reuses the cache
  return cv;
}

// Positions of the random model: LLaDA-8B's context is 4096, and the benchmark goes twice as far.
constexpr int bench_max_seq = 8192;

int run_bench(const bench_options& o) {
  gpu::model_config c;
  c.d_model = o.d_model;
  c.n_layers = o.layers;
  c.n_heads = o.heads;
  c.n_kv_heads = o.heads;
  c.mlp_hidden = ((8 * o.d_model / 3 + 31) / 32) * 32;
  c.vocab_size = o.vocab;
  c.mask_id = 1;
  c.eos_id = 0;
  c.max_seq = bench_max_seq;
  auto big = gpu::make_random_model(c, 5);
  auto be = gpu::make_cpu_backend(big);
  gpu::cpu::pin_blas_threads();
  nlohmann::json out;
  out["model"] = {{"d_model", c.d_model}, {"layers", c.n_layers}, {"heads", c.n_heads},
                  {"mlp_hidden", c.mlp_hidden}, {"vocab", c.vocab_size}, {"block", o.block}};
  out["lengths"] = nlohmann::json::array();
  if (!o.json)
    std::printf("LLaDA-shaped random model: d %d, %d layers, %d heads, MLP %d, vocab %d; block %d; 1 core\n",
                c.d_model, c.n_layers, c.n_heads, c.mlp_hidden, c.vocab_size, o.block);
  for (int L : o.lengths) {
    double ceiling = sgemm_ceiling(c, L, o.reps);
    auto refresh = bench_canvas(c, L, o.block, false);
    auto reuse = bench_canvas(c, L, o.block, true);
    auto cache = be->make_cache();
    std::vector<std::vector<gpu::row_proposal>> props;
    std::vector<gpu::forward_item> ri{{&refresh, refresh.next_step(), cache.get()}};
    std::vector<gpu::forward_item> ui{{&reuse, reuse.next_step(), cache.get()}};
    // Refresh and reuse steps alternate, and the ratio is taken per pair (one refresh against the
    // median of three reuse steps right after it) before its median: a shared machine's load
    // drifts over seconds, and timing all refreshes before all reuse steps measured that drift.
    be->forward(ri, props);  // warm-up: first-touch of buffers and caches
    be->forward(ui, props);
    std::vector<double> refs, reus, ratios;
    for (int r = 0; r < o.reps; ++r) {
      const double a = seconds_of([&] { be->forward(ri, props); });
      std::vector<double> u;
      for (int i = 0; i < 3; ++i) u.push_back(seconds_of([&] { be->forward(ui, props); }));
      const double b = median(u);
      refs.push_back(a);
      reus.push_back(b);
      ratios.push_back(a / b);
    }
    const double t_ref = median(refs), t_reu = median(reus), time_ratio = median(ratios);
    // The same refresh one layer at a time (each range resumes from the hidden states the last
    // one left), paired with a whole refresh per repetition like the ratio above.
    std::vector<double> split_ratios, split_sums;
    for (int r = 0; r < o.reps; ++r) {
      const double whole = seconds_of([&] { be->forward(ri, props); });
      double sum = 0;
      for (int l = 0; l < c.n_layers; ++l) {
        std::vector<gpu::forward_item> part = ri;
        part[0].plan.layer0 = l;
        part[0].plan.layer1 = l + 1;
        sum += seconds_of([&] { be->forward(part, props); });
      }
      split_sums.push_back(sum);
      split_ratios.push_back(sum / whole);
    }
    const double split_ratio = median(split_ratios);
    double f_ref = step_flops(c, L, L, o.block), f_reu = step_flops(c, o.block, L, o.block);
    nlohmann::json row{{"length", L},
                       {"sgemm_gflops", ceiling},
                       {"refresh_ms", t_ref * 1e3},
                       {"refresh_gflops", f_ref / t_ref / 1e9},
                       {"refresh_share_of_ceiling", f_ref / t_ref / 1e9 / ceiling},
                       {"reuse_ms", t_reu * 1e3},
                       {"reuse_gflops", f_reu / t_reu / 1e9},
                       {"time_ratio", time_ratio},
                       {"flop_ratio", f_ref / f_reu},
                       {"speedup_share_of_flop_ratio", time_ratio / (f_ref / f_reu)},
                       {"split_sum_ms", median(split_sums) * 1e3},
                       {"split_over_whole", split_ratio}};
    if (!o.skip_tp && std::thread::hardware_concurrency() >= 2) {
      gpu::tp_runner tp2(big, 2);
      // Time the sharded forward only: both ranks run the same plan in lockstep.
      auto& e0 = tp2.rank_engine(0);
      auto& e1 = tp2.rank_engine(1);
      auto c0 = e0.device().make_cache(), c1 = e1.device().make_cache();
      std::vector<gpu::forward_item> i0{{&refresh, refresh.next_step(), c0.get()}};
      std::vector<gpu::forward_item> i1{{&refresh, refresh.next_step(), c1.get()}};
      std::vector<std::vector<gpu::row_proposal>> p1;
      double t_tp2 = median_seconds(o.reps, [&] {
        std::thread t([&] { e1.device().forward(i1, p1); });
        e0.device().forward(i0, props);
        t.join();
      });
      row["tp2_refresh_ms"] = t_tp2 * 1e3;
      row["tp2_speedup"] = t_ref / t_tp2;
    }
    out["lengths"].push_back(row);
    if (!o.json) {
      std::printf("L=%-5d sgemm ceiling %6.1f GFLOP/s | refresh %8.2f ms %6.1f GFLOP/s (%3.0f%% of ceiling) | "
                  "reuse %7.2f ms %6.1f GFLOP/s | time ratio %5.1fx vs FLOP ratio %5.1fx (%3.0f%%)",
                  L, ceiling, t_ref * 1e3, f_ref / t_ref / 1e9, 100 * f_ref / t_ref / 1e9 / ceiling, t_reu * 1e3,
                  f_reu / t_reu / 1e9, time_ratio, f_ref / f_reu, 100 * time_ratio / (f_ref / f_reu));
      if (row.contains("tp2_speedup"))
        std::printf(" | TP2 %8.2f ms (%.2fx)", row["tp2_refresh_ms"].get<double>(), row["tp2_speedup"].get<double>());
      std::printf(" | split by layer %.2fx of whole", split_ratio);
      std::printf("\n");
    }
  }
  if (gpu::cpu::packed_gemm_available()) {
    // Every product of a reuse step (7 per layer, then the head), at M = block rows, with weights
    // too big to stay in cache between passes: the packed kernel, then OpenBLAS on the same data.
    struct product {
      const float* w;
      int out, in;
      gpu::cpu::packed_weights packed;
    };
    std::vector<product> ws;
    const int d = c.d_model, ff = c.mlp_hidden, M = std::min(o.block, gpu::cpu::packed_weights::max_rows);
    auto add = [&](const float* w, int out, int in) { ws.push_back({w, out, in, gpu::cpu::packed_weights(w, out, in, in)}); };
    for (const auto& l : big->layers) {
      add(l.q_proj, d, d), add(l.k_proj, c.kv_dim(), d), add(l.v_proj, c.kv_dim(), d), add(l.attn_out, d, d);
      add(l.ff_proj, ff, d), add(l.up_proj, ff, d), add(l.ff_out, d, ff);
    }
    add(big->head, c.vocab_size, d);
    std::vector<float> x(static_cast<std::size_t>(M) * ff, 0.5f), y(static_cast<std::size_t>(M) * c.vocab_size);
    double flops = 0, bytes = 0;
    for (const auto& p : ws) flops += 2.0 * M * p.out * p.in, bytes += 4.0 * p.out * p.in;
    const double t_packed = median_seconds(o.reps * 3, [&] {
      for (const auto& p : ws) gpu::cpu::matmul_packed(x.data(), M, p.in, p.packed, y.data(), p.out);
    });
    const double t_blas = median_seconds(o.reps * 3, [&] {
      for (const auto& p : ws) gpu::cpu::matmul_xwt(x.data(), M, p.in, p.in, p.w, p.out, p.in, y.data(), p.out);
    });
    out["small_m_pass"] = {{"rows", M}, {"weight_mb", bytes / 1e6}, {"packed_ms", t_packed * 1e3},
                           {"openblas_ms", t_blas * 1e3}, {"packed_gflops", flops / t_packed / 1e9},
                           {"openblas_gflops", flops / t_blas / 1e9}};
    if (!o.json)
      std::printf("one pass of %d rows over all %.0f MB of weights: packed kernel %.2f ms (%.1f GFLOP/s), "
                  "OpenBLAS %.2f ms (%.1f GFLOP/s)\n",
                  M, bytes / 1e6, t_packed * 1e3, flops / t_packed / 1e9, t_blas * 1e3, flops / t_blas / 1e9);
  }
  // Tokens/s on the shipped model, batched like the serving loop.
  auto tiny = gpu::load_model(o.model);
  auto tok = gpu::load_tokenizer(o.model);
  auto problems = gpu::load_eval_set(o.model + "/eval.jsonl");
  if (problems.size() > static_cast<std::size_t>(o.problems)) problems.resize(static_cast<std::size_t>(o.problems));
  out["shipped"] = nlohmann::json::array();
  gpu::engine eng(gpu::make_cpu_backend(tiny));
  for (const char* cache : {"none", "dual"})
    for (double tau : {0.7, 0.9, -1.0}) {
      std::vector<gpu::request_slot> slots;
      for (const auto& p : problems) {
        gpu::decode_params dp;
        dp.gen_length = p.gen_length > 0 ? p.gen_length : 32;
        dp.block_length = 8;
        dp.cache = gpu::parse_cache_mode(cache);
        if (tau < 0) {
          dp.rule = gpu::commit_rule::quota;
        } else {
          dp.threshold = tau;
        }
        slots.push_back(eng.admit(gpu::canvas::start(tok->encode(p.prompt), dp, tiny->config.mask_id, tiny->config.eos_id)));
      }
      auto t0 = clock_type::now();
      gpu::decode_all(eng, slots, 16);
      double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
      long long tokens = 0, steps = 0;
      for (auto& s : slots) {
        tokens += s.c.committed;
        steps += s.c.steps;
      }
      std::string label = tau < 0 ? "one-per-step" : "tau=" + std::to_string(tau).substr(0, 3);
      nlohmann::json row{{"setting", label}, {"cache", cache}, {"tokens_per_second", tokens / secs},
                         {"tokens_per_step", double(tokens) / double(steps)}, {"seconds", secs}};
      out["shipped"].push_back(row);
      if (!o.json)
        std::printf("shipped model, %zu problems, batch 16: %-13s cache=%-4s %8.0f tokens/s  %.2f tokens/step\n",
                    problems.size(), label.c_str(), cache, tokens / secs, double(tokens) / double(steps));
    }
  if (o.json) std::cout << out.dump() << "\n";
  return 0;
}

register_command reg{"bench-engine", [](CLI::App& app) {
  auto* sub = app.add_subcommand("bench-engine", "benchmark the CPU engine against the sgemm ceiling");
  auto o = std::make_shared<bench_options>();
  sub->add_option("--model", o->model, "shipped model folder for the tokens/s part");
  sub->add_option("--d-model", o->d_model, "width of the random LLaDA-shaped model")->check(CLI::Range(64, 8192));
  sub->add_option("--layers", o->layers, "layers of the random model")->check(CLI::Range(1, 128));
  sub->add_option("--heads", o->heads, "heads of the random model")->check(CLI::Range(1, 256));
  sub->add_option("--vocab", o->vocab, "vocabulary of the random model")->check(CLI::Range(16, 262144));
  sub->add_option("--block", o->block, "block length of the reuse step")->check(dls::cli::positive);
  sub->add_option("--lengths", o->lengths, "sequence lengths")->delimiter(',');
  sub->add_option("--reps", o->reps, "timed repetitions (the median is reported)")->check(CLI::Range(1, 1000));
  sub->add_option("--problems", o->problems, "eval problems for the tokens/s part")->check(dls::cli::positive);
  sub->add_flag("--skip-tp", o->skip_tp, "skip the TP=2 measurement");
  sub->add_flag("--json", o->json, "print one JSON object");
  return std::function<int()>([o] {
    for (int L : o->lengths)
      if (L <= o->block || L > bench_max_seq)
        throw std::invalid_argument("--lengths: " + std::to_string(L) + " is outside (" + std::to_string(o->block) +
                                    ", " + std::to_string(bench_max_seq) + "], the block and the random model's positions");
    if (o->d_model % o->heads) throw std::invalid_argument("--d-model must be a multiple of --heads");
    return run_bench(*o);
  });
}};

}  // namespace
}  // namespace dls::cli
