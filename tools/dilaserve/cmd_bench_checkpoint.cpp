// dilaserve bench-checkpoint DIR: loads a checkpoint folder through the serving loader, runs the
// CPU engine's refresh and dual-cache reuse steps on one canvas, and reports the median time and
// query rows per second of each step kind, with the process's resident memory against the
// checkpoint's weight bytes plus the KV cache. For 8B widths, on a reduced-depth random copy
// (write-random-checkpoint --layers 2). With --device cuda the memory line counts host memory only.
#include "dilaserve/command_registry.hpp"
#include "dilaserve/decode_options.hpp"
#include "dilaserve/median.hpp"
#include "dilaserve/validators.hpp"
#include "gpu/cpu_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/model.hpp"
#include "gpu/safetensors.hpp"

#include <dirent.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

struct bench_options {
  std::string dir;
  int prompt = 480;
  int block = 32;
  int reps = 3;
  bool json = false;
  std::string device = "cpu";
};

// VmRSS or VmHWM of this process, in bytes.
int64_t status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line))
    if (line.compare(0, k.size(), k) == 0) return std::stoll(line.substr(k.size())) * 1024;
  return -1;
}

int64_t safetensors_bytes(const std::string& dir) {
  int64_t total = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0) {
        std::ifstream f(dir + "/" + n, std::ios::binary | std::ios::ate);
        total += static_cast<int64_t>(f.tellg());
      }
    }
    ::closedir(d);
  }
  return total;
}

int run_bench(const bench_options& o) {
  namespace g = dls::gpu;
  using clock_type = std::chrono::steady_clock;
  const int64_t rss0 = status_bytes("VmRSS");
  auto t0 = clock_type::now();
  auto m = g::load_model(o.dir);
  const double load_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  const int64_t rss_loaded = status_bytes("VmRSS");
  dls::cli::decode_flags flags;
  flags.device = o.device;
  g::engine e(flags.make_backend(m));
  const auto& c = m->config;
  g::decode_params p;
  p.gen_length = o.block;
  p.block_length = o.block;
  p.rule = g::commit_rule::quota;  // one token per step: every step of the block stays a reuse
  p.cache = g::cache_mode::dual;
  std::vector<int32_t> prompt(static_cast<std::size_t>(o.prompt));
  for (std::size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<int32_t>((i * 7919 + 13) % static_cast<std::size_t>(c.vocab_size));
  for (auto& t : prompt)
    if (t == c.mask_id || t == c.eos_id) t = (t + 1) % c.vocab_size;
  std::vector<double> refresh, reuse;
  int refresh_rows = 0, reuse_rows = 0;
  std::size_t kv_bytes = 0;
  for (int r = 0; r < o.reps; ++r) {
    auto s = e.admit(g::canvas::start(prompt, p, c.mask_id, c.eos_id));
    auto a = e.step({&s});
    refresh.push_back(a[0].seconds);
    refresh_rows = a[0].query_rows;
    auto b = e.step({&s});
    reuse.push_back(b[0].seconds);
    reuse_rows = b[0].query_rows;
    kv_bytes = s.cache->bytes();
  }
  const int64_t hwm = status_bytes("VmHWM");
  const int64_t weights = safetensors_bytes(o.dir);
  const double rf = dls::cli::median(refresh), ru = dls::cli::median(reuse);
  const double bound = static_cast<double>(weights) + static_cast<double>(kv_bytes);
  if (o.json) {
    nlohmann::json j{{"model", o.dir},
                     {"architecture", g::architecture_name(c.arch)},
                     {"layers", c.n_layers},
                     {"d_model", c.d_model},
                     {"canvas", o.prompt + o.block},
                     {"load_s", load_s},
                     {"refresh_s", rf},
                     {"refresh_rows", refresh_rows},
                     {"reuse_s", ru},
                     {"reuse_rows", reuse_rows},
                     {"weights_bytes", weights},
                     {"kv_bytes", kv_bytes},
                     {"rss_before_load", rss0},
                     {"rss_after_load", rss_loaded},
                     {"peak_rss", hwm},
                     {"peak_over_weights_plus_kv", static_cast<double>(hwm) / bound}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s: %s, %d layers, d %d, canvas %d (prompt %d + block %d), load %.1f s\n", o.dir.c_str(),
              g::architecture_name(c.arch), c.n_layers, c.d_model, o.prompt + o.block, o.prompt, o.block, load_s);
  std::printf("refresh: median %.3f s over %d query rows = %.0f rows/s\n", rf, refresh_rows, refresh_rows / rf);
  std::printf("reuse:   median %.3f s over %d query rows = %.0f rows/s (%.1fx faster than a refresh)\n", ru,
              reuse_rows, reuse_rows / ru, rf / ru);
  std::printf("memory: weights %.2f GB (bf16 files), KV cache %.1f MB; peak RSS %.2f GB = %.3fx weights + KV "
              "(after load %.2f GB)\n",
              static_cast<double>(weights) / 1e9, static_cast<double>(kv_bytes) / 1e6, static_cast<double>(hwm) / 1e9,
              static_cast<double>(hwm) / bound, static_cast<double>(rss_loaded) / 1e9);
  return 0;
}

dls::cli::register_command reg{"bench-checkpoint", [](CLI::App& app) {
  auto* sub = app.add_subcommand("bench-checkpoint",
                                 "Refresh and reuse step times and resident memory of a checkpoint on the CPU engine");
  auto o = std::make_shared<bench_options>();
  sub->add_option("dir", o->dir, "Checkpoint folder")->required();
  sub->add_option("--prompt", o->prompt, "Prompt tokens of the canvas")->check(dls::cli::positive);
  sub->add_option("--block", o->block, "Block (and answer) length")->check(dls::cli::positive);
  sub->add_option("--reps", o->reps, "Canvases to time (median)")->check(dls::cli::positive);
  sub->add_flag("--json", o->json, "One JSON object");
  sub->add_option("--device", o->device, "engine backend: cpu, cuda or cuda:N");
  return std::function<int()>([o] { return run_bench(*o); });
}};

}  // namespace
