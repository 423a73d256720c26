// dilaserve bench-tokenizer: encoding throughput of a checkpoint's tokenizer on one thread, in MB/s
// of input. "Cold": the first pass of a freshly loaded tokenizer (empty merged-word cache), once per
// load; "warm": later passes over the same text, which find its words cached, as a serving process
// that has seen the language before does. Both are medians over --repeats, per second of wall
// time and per second of this thread's CPU time (which other jobs on a shared machine do not eat).
#include "dilaserve/command_registry.hpp"
#include "dilaserve/median.hpp"
#include "gpu/tokenizer.hpp"

#include <chrono>
#include <ctime>
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
  const double mb = static_cast<double>(text.size()) / 1e6;
  auto seconds_since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto thread_cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  };
  std::vector<double> cold, warm, cold_cpu, warm_cpu, load;
  std::size_t tokens = 0;
  for (int r = 0; r < o.repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    auto tok = gpu::load_tokenizer(o.model);
    load.push_back(seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    double c0 = thread_cpu();
    tokens = tok->encode(text).size();
    cold.push_back(mb / seconds_since(t0));
    cold_cpu.push_back(mb / (thread_cpu() - c0));
    t0 = std::chrono::steady_clock::now();
    c0 = thread_cpu();
    tok->encode(text);
    warm.push_back(mb / seconds_since(t0));
    warm_cpu.push_back(mb / (thread_cpu() - c0));
  }
  std::printf("tokenizer %s: %.2f MB input, %zu tokens (%.2f bytes/token), load %.2f s\n", o.model.c_str(), mb,
              tokens, static_cast<double>(text.size()) / static_cast<double>(tokens), median(load));
  std::printf("encode, one thread, medians of %d: cold %.1f MB/s, warm %.1f MB/s (per CPU-second: cold %.1f, warm %.1f)\n",
              o.repeats, median(cold), median(warm), median(cold_cpu), median(warm_cpu));
  return 0;
}

register_command reg{"bench-tokenizer", [](CLI::App& app) {
  auto* sub = app.add_subcommand("bench-tokenizer", "measure a tokenizer's encoding speed on one thread");
  auto o = std::make_shared<bench_tokenizer_options>();
  sub->add_option("--model", o->model, "folder with tokenizer.json (and tokenizer_config.json)")->required();
  sub->add_option("--input", o->inputs, "text files to encode, concatenated")->required();
  sub->add_option("--repeats", o->repeats, "loads, each followed by a cold and a warm pass")->check(CLI::Range(1, 1000));
  return std::function<int()>([o] { return run_bench_tokenizer(*o); });
}};

}  // namespace
}  // namespace dls::cli
