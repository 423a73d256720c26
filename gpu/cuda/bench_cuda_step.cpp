// bench_cuda_step: step latency of the CUDA backend on a LLaDA-8B-shaped model with random bf16
// weights (generated on the device), beside the roofline
//   max(FLOPs / measured bf16 GEMM peak, bytes / measured device-to-device copy bandwidth)
// with both peaks measured in the same run. Writes a measured step-cost profile for the
// simulator (policies/step_cost.hpp, kind "measured").
//
//   bench_cuda_step [--device N] [--prompts 512,1024,2048] [--gen 256] [--block 32]
//                   [--batches 1,8] [--reps 5] [--profile FILE] [--small] [--breakdown]
//   bench_cuda_step --count     prints the number of usable CUDA devices and exits
#include "gpu/canvas.hpp"
#include "gpu/cuda/cuda_backend.hpp"
#include "gpu/cuda/cuda_testing.hpp"
#include "gpu/model_config.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace dls::gpu;

namespace {

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(std::stoi(item));
  return out;
}

struct options {
  int device = 0;
  std::vector<int> prompts = {512, 1024, 2048};
  std::vector<int> batches = {1, 8};
  int gen = 256;
  int block = 32;
  int reps = 5;
  std::string profile;
  bool small = false;  // a tiny shape, to smoke-test the harness quickly
  bool breakdown = false;
};

struct sample {
  std::string kind;
  int prompt = 0, batch = 0, query_rows = 0, key_rows = 0, logit_rows = 0;
  double seconds = 0, roof_s = 0, flops = 0, bytes = 0;
  std::vector<std::pair<std::string, double>> phases;  // --breakdown: GPU time per phase
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string iso_date() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

int run(const options& o) {
  const int n = cuda_device_count();
  if (n == 0) {
    std::fprintf(stderr, "bench_cuda_step: no usable CUDA device\n");
    return 2;
  }
  const std::string dev = cuda_device_description(o.device);
  const model_config cfg = o.small ? cuda_testing::small_bench_config() : llada_8b_config();
  std::printf("device: %s\n", dev.c_str());
  std::printf("model: d %d, layers %d, heads %d, mlp %d, vocab %d (random bf16)\n", cfg.d_model, cfg.n_layers,
              cfg.n_heads, cfg.mlp_hidden, cfg.vocab_size);

  // Peaks, measured in this run.
  const double peak_flops = cuda_testing::measure_gemm_bf16_flops(o.device, o.small ? 2048 : 8192, 20);
  const double peak_bw = cuda_testing::measure_copy_bytes_per_s(o.device, std::size_t{1} << 30, 20);
  std::printf("measured bf16 GEMM peak: %.1f TFLOP/s; device-to-device copy: %.0f GB/s (read + write)\n",
              peak_flops / 1e12, peak_bw / 1e9);

  auto t0 = std::chrono::steady_clock::now();
  auto weights = make_random_cuda_weights(cfg, 1, o.device);
  std::printf("weights: %.2f GB bf16 on device in %.1f s\n", static_cast<double>(weights_bytes(*weights)) / 1e9,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  auto b = make_cuda_backend(weights);
  // --breakdown: a second backend on the same weights that times each phase with events.
  std::unique_ptr<backend> pb;
  if (o.breakdown) {
    cuda_backend_options po;
    po.profile_phases = true;
    pb = make_cuda_backend(weights, po);
  }

  const double d = cfg.d_model, L = cfg.n_layers, kv = cfg.kv_dim(), ff = cfg.mlp_hidden, V = cfg.vocab_size;
  const double nonembed = L * (2 * d * d + 2 * d * kv + 3 * d * ff);  // matrices the layers multiply by
  const double head = V * d;
  const double weight_bytes = 2.0 * (nonembed + head);  // bf16 read once per step
  const double kv_bytes_per_row = L * 2 * kv * 2.0;     // K and V, bf16, all layers

  std::vector<sample> samples;
  std::mt19937 rng(17);
  for (int P : o.prompts) {
    for (int B : o.batches) {
      decode_params p;
      p.gen_length = o.gen;
      p.block_length = o.block;
      p.rule = commit_rule::threshold;
      p.cache = cache_mode::dual;
      std::vector<canvas> cs;
      std::vector<std::unique_ptr<kv_cache>> caches, pcaches;
      for (int i = 0; i < B; ++i) {
        std::vector<int32_t> prompt(static_cast<std::size_t>(P));
        for (auto& t : prompt) {
          do t = static_cast<int32_t>(rng() % static_cast<unsigned>(cfg.vocab_size));
          while (t == cfg.mask_id);
        }
        cs.push_back(canvas::start(prompt, p, cfg.mask_id, cfg.eos_id));
        caches.push_back(b->make_cache());
        if (pb) pcaches.push_back(pb->make_cache());
      }
      for (const char* kind : {"refresh", "reuse"}) {
        std::vector<forward_item> items;
        for (int i = 0; i < B; ++i) {
          const canvas& c = cs[static_cast<std::size_t>(i)];
          step_plan plan = c.next_step();  // the block's first step: a refresh
          if (std::string(kind) == "reuse") {
            plan.kind = step_kind::reuse;
            plan.q0 = plan.block0;
            plan.q1 = plan.block1;  // dual cache: only the block's rows
          }
          items.push_back({&c, plan, caches[static_cast<std::size_t>(i)].get()});
        }
        std::vector<std::vector<row_proposal>> props;
        // Warm-up: the first forward of a shape runs eagerly (and, for refresh, fills the caches
        // reuse reads), the second captures its CUDA graph; the timed ones replay it.
        b->forward(items, props);
        b->forward(items, props);
        std::vector<double> times;
        for (int r = 0; r < o.reps; ++r) {
          auto s0 = std::chrono::steady_clock::now();
          b->forward(items, props);
          times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count());
        }
        sample s;
        if (pb) {
          // Same steps on the profiling backend (its own caches; refresh runs first there too).
          std::vector<forward_item> pitems = items;
          for (int i = 0; i < B; ++i) pitems[static_cast<std::size_t>(i)].cache = pcaches[static_cast<std::size_t>(i)].get();
          pb->forward(pitems, props);
          pb->forward(pitems, props);
          s.phases = cuda_step_phases(*pb);
        }
        s.kind = kind;
        s.prompt = P;
        s.batch = B;
        s.query_rows = items[0].plan.query_rows();
        s.key_rows = items[0].plan.key_rows;
        s.logit_rows = items[0].plan.block1 - items[0].plan.block0;
        s.seconds = median(times);
        const double q = s.query_rows, k = s.key_rows;
        s.flops = B * (2 * nonembed * q + 4 * L * cfg.n_heads * cfg.head_dim() * q * k + 2 * head * s.logit_rows);
        s.bytes = weight_bytes + B * kv_bytes_per_row * (k + q);
        s.roof_s = std::max(s.flops / peak_flops, s.bytes / peak_bw);
        samples.push_back(s);
        std::fflush(stdout);
      }
    }
  }

  std::printf("\n| prompt | batch | step | q rows | k rows | measured ms | roofline ms | ratio | bound | TFLOP/s | GB/s |\n");
  std::printf("|---:|---:|---|---:|---:|---:|---:|---:|---|---:|---:|\n");
  for (const auto& s : samples) {
    const bool compute = s.flops / peak_flops >= s.bytes / peak_bw;
    std::printf("| %d | %d | %s | %d | %d | %.2f | %.2f | %.2f | %s | %.0f | %.0f |\n", s.prompt, s.batch,
                s.kind.c_str(), s.query_rows, s.key_rows, s.seconds * 1e3, s.roof_s * 1e3, s.seconds / s.roof_s,
                compute ? "compute" : "memory", s.flops / s.seconds / 1e12, s.bytes / s.seconds / 1e9);
  }
  std::printf("\nroofline: max(FLOPs / %.1f TFLOP/s, bytes / %.0f GB/s); FLOPs = batch (2 P_layers q + 4 L d q k + "
              "2 P_head logit_rows); bytes = bf16 weights + batch KV (k read + q written)\n",
              peak_flops / 1e12, peak_bw / 1e9);
  std::printf("targets: refresh within 1.5x, reuse within 2x of the roofline\n");

  if (o.breakdown) {
    // Where a step's time goes, measured in place: each phase of one eager step bracketed by
    // CUDA events (summed over layers); "host + gaps" is the graph-replayed step's wall time
    // minus the phases' GPU time. Beside it, the attention of one layer timed alone with each
    // tensor-core kernel (x layers), the mma kernel against the WMMA one it replaced.
    const int hd = cfg.head_dim();
    std::vector<std::string> names;
    for (const auto& s : samples)
      for (const auto& [n, t] : s.phases)
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    std::printf("\nbreakdown (ms per step, in place):\n| prompt | batch | step | measured |");
    for (const auto& n : names) std::printf(" %s |", n.c_str());
    std::printf(" host + gaps | attention alone: mma | wmma |\n|---:|---:|---|---:|");
    for (std::size_t i = 0; i < names.size(); ++i) std::printf("---:|");
    std::printf("---:|---:|---:|\n");
    for (const auto& s : samples) {
      std::printf("| %d | %d | %s | %.2f |", s.prompt, s.batch, s.kind.c_str(), s.seconds * 1e3);
      double gpu = 0;
      for (const auto& n : names) {
        double t = 0;
        for (const auto& [m, v] : s.phases)
          if (m == n) t = v;
        gpu += t;
        std::printf(" %.2f |", t * 1e3);
      }
      const double att = cuda_testing::time_attention(o.device, s.batch, s.query_rows, s.key_rows, cfg.n_heads,
                                                      cfg.n_kv_heads, hd, cuda_attention::automatic) * cfg.n_layers;
      const double att_wmma = cuda_testing::time_attention(o.device, s.batch, s.query_rows, s.key_rows, cfg.n_heads,
                                                           cfg.n_kv_heads, hd, cuda_attention::tensor_core) *
                              cfg.n_layers;
      std::printf(" %.2f | %.2f | %.2f |\n", (s.seconds - gpu) * 1e3, att * 1e3, att_wmma * 1e3);
      std::fflush(stdout);
    }
  }

  if (!o.profile.empty()) {
    std::ofstream f(o.profile);
    if (!f) {
      std::fprintf(stderr, "bench_cuda_step: cannot write %s\n", o.profile.c_str());
      return 1;
    }
    f.precision(9);
    f << "# Measured step-cost profile (policies/step_cost.hpp, kind measured), written by\n"
      << "# tools/gpu_check.sh / bench_cuda_step. Each sample: `batch` identical requests, one step.\n"
      << "kind: measured\n"
      << "hardware: \"" << dev << "\"\n"
      << "model: \"" << (o.small ? "small LLaDA-shaped test model" : "LLaDA-8B shape") << ", random bf16 weights\"\n"
      << "source: \"bench_cuda_step " << iso_date() << "; gen " << o.gen << ", block " << o.block
      << ", dual cache; median of " << o.reps << " steps\"\n"
      << "measured:\n"
      << "  gemm_bf16_flops: " << peak_flops << "\n"
      << "  d2d_copy_bytes_per_s: " << peak_bw << "\n"
      << "memory:\n"
      << "  weight_bytes: " << weight_bytes << "\n"
      << "  kv_bytes_per_token: " << kv_bytes_per_row << "\n"
      << "samples:\n";
    for (const auto& s : samples)
      f << "  - {tp: 1, kind: " << s.kind << ", batch: " << s.batch << ", query_rows: " << s.query_rows
        << ", key_rows: " << s.key_rows << ", seconds: " << s.seconds << ", roofline_seconds: " << s.roof_s << "}\n";
    std::printf("profile: %s\n", o.profile.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_cuda_step: %s needs a value\n", a.c_str());
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--count") {
      std::printf("%d\n", cuda_device_count());
      return 0;
    } else if (a == "--device") {
      o.device = std::stoi(value());
    } else if (a == "--prompts") {
      o.prompts = parse_list(value());
    } else if (a == "--batches") {
      o.batches = parse_list(value());
    } else if (a == "--gen") {
      o.gen = std::stoi(value());
    } else if (a == "--block") {
      o.block = std::stoi(value());
    } else if (a == "--reps") {
      o.reps = std::max(1, std::stoi(value()));
    } else if (a == "--profile") {
      o.profile = value();
    } else if (a == "--small") {
      o.small = true;
    } else if (a == "--breakdown") {
      o.breakdown = true;
    } else {
      std::fprintf(stderr, "usage: bench_cuda_step [--device N] [--prompts 512,1024,2048] [--gen 256] [--block 32]\n"
                           "                       [--batches 1,8] [--reps 5] [--profile FILE] [--small] [--breakdown] | --count\n");
      return a == "--help" || a == "-h" ? 0 : 1;
    }
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_step: %s\n", e.what());
    return 1;
  }
}
