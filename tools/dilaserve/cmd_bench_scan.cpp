// `dilaserve bench-scan`: how long the loader's NaN/Inf scan of the weights takes, for a
// model folder, and what that throughput means for LLaDA-8B's weights.
#include "dilaserve/command_registry.hpp"
#include "dilaserve/median.hpp"
#include "dilaserve/validators.hpp"
#include "gpu/finite_scan.hpp"
#include "gpu/model.hpp"
#include "gpu/safetensors.hpp"

#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct scan_options {
  std::string model = "models/tiny-llada";
  int repeat = 21;
  int buffer_mb = 512;  // far beyond any cache, as 8B's weights are
};

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

int run_scan(const scan_options& o) {
  namespace g = dls::gpu;
  // The tensors as the loader scans them: f32, converted once from bf16/f16.
  std::vector<std::shared_ptr<g::safetensors_file>> files;
  std::vector<std::vector<float>> converted;
  std::vector<std::pair<const float*, std::size_t>> tensors;
  DIR* d = ::opendir(o.model.c_str());
  if (!d) throw std::runtime_error(o.model + ": cannot open model directory");
  while (auto* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.size() <= 12 || n.compare(n.size() - 12, 12, ".safetensors") != 0) continue;
    files.push_back(std::make_shared<g::safetensors_file>(o.model + "/" + n));
  }
  ::closedir(d);
  std::size_t values = 0;
  for (auto& f : files)
    for (auto& [name, v] : f->tensors()) {
      auto n = static_cast<std::size_t>(v.numel());
      if (v.type == g::dtype::f32) {
        tensors.emplace_back(reinterpret_cast<const float*>(v.data), n);
      } else {
        converted.emplace_back(n);
        v.to_f32(converted.back().data());
        tensors.emplace_back(converted.back().data(), n);
      }
      values += n;
    }
  if (tensors.empty()) throw std::runtime_error(o.model + ": no tensors");
  std::vector<double> scans, loads;
  int64_t found = 0;
  for (int r = 0; r < o.repeat; ++r) {
    auto t0 = clock_type::now();
    for (auto& [p, n] : tensors) found += g::first_non_finite(p, n) >= 0;
    scans.push_back(seconds_since(t0));
    t0 = clock_type::now();
    g::load_model(o.model);
    loads.push_back(seconds_since(t0));
  }
  // A small model stays in cache; a large one streams from memory, which is what sets the
  // rate for 8B: time the same scan over a buffer much larger than the caches.
  std::vector<float> big(static_cast<std::size_t>(o.buffer_mb) * (1u << 20) / sizeof(float), 0.25f);
  std::vector<double> big_scans;
  for (int r = 0; r < std::max(3, o.repeat / 4); ++r) {
    auto t0 = clock_type::now();
    found += g::first_non_finite(big.data(), big.size()) >= 0;
    big_scans.push_back(seconds_since(t0));
  }
  double big_gb_per_s = static_cast<double>(big.size() * sizeof(float)) / dls::cli::median(big_scans) / 1e9;
  double scan = dls::cli::median(scans);
  double gb_per_s = static_cast<double>(values * sizeof(float)) / scan / 1e9;
  auto llada = g::llada_8b_config().parameter_count();
  std::printf("%zu tensors, %zu values (%.1f MB as f32); %lld non-finite tensors found\n", tensors.size(), values,
              static_cast<double>(values * sizeof(float)) / 1e6, static_cast<long long>(found / o.repeat));
  std::printf("scan: median %.3f ms of %d runs (%.1f GB/s); whole load_model incl. scan: median %.3f ms\n",
              scan * 1e3, o.repeat, gb_per_s, dls::cli::median(loads) * 1e3);
  std::printf("out of cache: %d MB buffer, median %.1f GB/s\n", o.buffer_mb, big_gb_per_s);
  std::printf("LLaDA-8B: %lld weights = %.1f GB as f32 -> about %.1f s of scan at the out-of-cache rate\n",
              static_cast<long long>(llada), static_cast<double>(llada) * 4 / 1e9,
              static_cast<double>(llada) * 4 / 1e9 / big_gb_per_s);
  return 0;
}

dls::cli::register_command reg{"bench-scan", [](CLI::App& app) {
  auto* sub = app.add_subcommand("bench-scan", "Time the loader's NaN/Inf scan of a model's weights");
  auto o = std::make_shared<scan_options>();
  sub->add_option("--model", o->model, "Model folder (*.safetensors)");
  sub->add_option("--repeat", o->repeat, "Runs to take the median of")->check(dls::cli::positive);
  sub->add_option("--buffer-mb", o->buffer_mb, "Size of the out-of-cache buffer")->check(dls::cli::positive);
  return std::function<int()>([o] { return run_scan(*o); });
}};

}  // namespace
