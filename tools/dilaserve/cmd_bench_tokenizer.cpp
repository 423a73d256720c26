// dilaserve bench-tokenizer: encoding throughput of a checkpoint's tokenizer on one thread. The
// first pass runs on a freshly loaded tokenizer (empty merged-word cache: "cold"); the later passes
// reuse its cache ("warm"), as a serving process does. Reports MB/s of input UTF-8.
#include "dilaserve/command_registry.hpp"
#include "dilaserve/median.hpp"
#include "gpu/tokenizer.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace dls::cli {
namespace {

struct bench_tokenizer_options {
  std::string model;
  std::vector<std::string> inputs;
  int repeats = 5;
};

int run_bench_tokenizer(const bench_tokenizer_options& o) {
  std::string text;
  for (const auto& path : o.inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::invalid_argument("--input " + path + ": cannot open");
    std::ostringstream s;
    s << in.rdbuf();
    text += s.str();
  }
  if (text.empty()) throw std::invalid_argument("--input files are empty");
  const auto t_load = std::chrono::steady_clock::now();
  auto tok = gpu::load_tokenizer(o.model);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::vector<double> warm;
  std::size_t tokens = 0;
  double cold = 0;
  for (int r = 0; r <= o.repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto ids = tok->encode(text);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tokens = ids.size();
    if (r == 0) cold = mb / s;
    else warm.push_back(mb / s);
  }
  std::printf("tokenizer %s: %.2f MB input, %zu tokens (%.2f bytes/token), loaded in %.2f s\n", o.model.c_str(), mb,
              tokens, static_cast<double>(text.size()) / static_cast<double>(tokens), load_s);
  std::printf("encode, one thread: cold %.1f MB/s, warm median of %d %.1f MB/s\n", cold, o.repeats, median(warm));
  return 0;
}

register_command reg{"bench-tokenizer", [](CLI::App& app) {
  auto* sub = app.add_subcommand("bench-tokenizer", "measure a tokenizer's encoding speed on one thread");
  auto o = std::make_shared<bench_tokenizer_options>();
  sub->add_option("--model", o->model, "folder with tokenizer.json (and tokenizer_config.json)")->required();
  sub->add_option("--input", o->inputs, "text files to encode, concatenated")->required();
  sub->add_option("--repeats", o->repeats, "warm passes after the cold one")->check(CLI::Range(1, 1000));
  return std::function<int()>([o] { return run_bench_tokenizer(*o); });
}};

}  // namespace
}  // namespace dls::cli
