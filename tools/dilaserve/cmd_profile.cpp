// dilaserve profile: measures the CPU engine's step times over a grid of TP degrees, canvas
// lengths and batch sizes, and writes a `kind: measured` step-cost profile (docs/policies.md,
// "Step-cost profiles") that `dilaserve sim` and the policies load as they load the shipped
// rooflines. Each point runs real steps through the engine the workers run (tp_runner: one
// thread per device slot, shared-memory all-reduce), so the profile describes this machine.
#include "dilaserve/command_registry.hpp"
#include "dilaserve/median.hpp"
#include "dilaserve/progress.hpp"
#include "dilaserve/validators.hpp"
#include "dilaserve/write_profile.hpp"
#include "gpu/model.hpp"
#include "gpu/tp_runner.hpp"
#include "policies/step_cost.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace dls::cli {
namespace {

using clock_type = std::chrono::steady_clock;

struct profile_options {
  std::string model = "models/tiny-llada";
  std::vector<int> tp{1, 2};
  std::vector<int> lengths;  // canvas lengths (prompt + answer); empty: from the model
  int longest = 0;           // with lengths empty: the longest canvas to measure; 0: the model's
  std::vector<int> batches{1, 4};
  int block = 8;
  int reps = 5;
  std::string out;
  std::string command_line;
};

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(line.find_first_not_of(' ', pos + 1));
    }
  return "unknown CPU";
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

struct point {
  int tp, length, batch;
};

// One answer block after the prompt, committed one token per step (quota rule), so the step
// after the refresh is a reuse step whatever the model proposes. Dual cache: a reuse step's
// queries are the block's rows and its keys the whole canvas, as in serving.
gpu::decode_params params_for(const profile_options& o) {
  gpu::decode_params p;
  p.gen_length = o.block;
  p.block_length = o.block;
  p.rule = gpu::commit_rule::quota;
  p.steps_per_block = o.block;
  p.cache = gpu::cache_mode::dual;
  return p;
}

// Median refresh and reuse step times of `batch` identical-shape requests, and, from a batch of
// 2 up, of a mixed batch as a loaded group steps it: half of them (rounded down) refreshing
// beside the others reusing. A linear fit over pure batches alone misjudges the mixed ones
// (docs/simulator.md, "Against the live runtime"). The first round warms caches and is not
// counted. A round whose canvases finish in the refresh (an EOS fill) has no reuse step to time
// and is run again, up to a bound.
std::vector<policy::profile_sample> measure(const std::shared_ptr<const gpu::model>& m, const profile_options& o,
                                            const point& pt, std::mt19937& rng) {
  const auto& cfg = m->config;
  gpu::tp_runner run(m, pt.tp);
  const auto params = params_for(o);
  std::uniform_int_distribution<int32_t> tok(0, cfg.vocab_size - 1);
  std::vector<double> ref_s, reu_s, mix_s;
  int ref_q = 0, ref_k = 0, reu_q = 0, reu_k = 0;
  const int refreshing = pt.batch / 2;
  int attempts = 0;
  auto admit = [&](int n) {
    std::vector<std::size_t> handles;
    for (int b = 0; b < n; ++b) {
      std::vector<int32_t> prompt(static_cast<std::size_t>(pt.length - o.block));
      for (auto& t : prompt) {
        do t = tok(rng);
        while (t == cfg.mask_id || t == cfg.eos_id);
      }
      handles.push_back(run.admit(gpu::canvas::start(prompt, params, cfg.mask_id, cfg.eos_id)));
    }
    return handles;
  };
  while (static_cast<int>(reu_s.size()) < o.reps + 1) {
    if (++attempts > 4 * (o.reps + 1))
      throw std::runtime_error("profile: the canvases kept finishing in their refresh step (EOS); no reuse step to time");
    auto handles = admit(pt.batch);
    // Each round's requests are released when it ends, as a worker releases a finished
    // request: with every canvas kept, each refresh wrote its KV cache into pages never touched
    // before, and the profile charged refreshes about 1.3x what a running worker takes
    // (docs/performance.md, "The profile's refreshes").
    struct release_round {
      gpu::tp_runner& run;
      std::vector<std::size_t>& handles;
      ~release_round() {
        for (auto h : handles) run.release(h);
      }
    } release{run, handles};
    auto t0 = clock_type::now();
    auto rep = run.step(handles);
    const double t_ref = std::chrono::duration<double>(clock_type::now() - t0).count();
    bool reuse_next = true;
    for (auto h : handles) {
      const auto& c = run.view(h);
      reuse_next = reuse_next && !c.finished && c.next_step().kind == gpu::step_kind::reuse;
    }
    if (!reuse_next) continue;
    t0 = clock_type::now();
    auto rep2 = run.step(handles);
    const double t_reu = std::chrono::duration<double>(clock_type::now() - t0).count();
    if (rep.front().kind != gpu::step_kind::refresh || rep2.front().kind != gpu::step_kind::reuse)
      throw std::logic_error("profile: the engine ran another step kind than planned");
    ref_q = rep.front().query_rows;
    ref_k = rep.front().key_rows;
    reu_q = rep2.front().query_rows;
    reu_k = rep2.front().key_rows;
    if (refreshing > 0) {
      // The first batch - refreshing requests go on reusing (one token a step over a block of
      // several), beside as many fresh ones taking their refresh.
      std::vector<std::size_t> mixed(handles.begin(), handles.end() - refreshing);
      for (auto h : admit(refreshing)) {
        mixed.push_back(h);
        handles.push_back(h);  // released with the round's
      }
      t0 = clock_type::now();
      auto rep3 = run.step(mixed);
      const double t_mix = std::chrono::duration<double>(clock_type::now() - t0).count();
      int refreshed = 0;
      for (const auto& r : rep3) refreshed += r.kind == gpu::step_kind::refresh ? 1 : 0;
      if (refreshed != refreshing) throw std::logic_error("profile: the mixed batch ran other step kinds than planned");
      mix_s.push_back(t_mix);
    }
    ref_s.push_back(t_ref);
    reu_s.push_back(t_reu);
  }
  // Drop the warm-up round.
  ref_s.erase(ref_s.begin());
  reu_s.erase(reu_s.begin());
  std::vector<policy::profile_sample> out{{pt.tp, policy::step_kind::refresh, pt.batch, ref_q, ref_k, median(ref_s)},
                                          {pt.tp, policy::step_kind::reuse, pt.batch, reu_q, reu_k, median(reu_s)}};
  if (refreshing > 0) {
    mix_s.erase(mix_s.begin());
    out.push_back({pt.tp, policy::step_kind::reuse, pt.batch, reu_q, reu_k, median(mix_s), refreshing});
  }
  return out;
}

std::string to_yaml(const profile_options& o, const gpu::model& m, const std::vector<policy::profile_sample>& samples) {
  const auto& c = m.config;
  std::ostringstream y;
  y.precision(9);
  y << "# Measured step-cost profile of the CPU engine, written by `dilaserve profile`\n"
    << "# (docs/policies.md, \"Step-cost profiles\"). One device slot is one core.\n"
    << "format: dilaserve-step-profile/1\n"
    << "kind: measured\n"
    << "hardware: \"" << cpu_name() << ", " << std::thread::hardware_concurrency() << " hardware threads\"\n"
    << "model: \"" << m.source << " (d_model " << c.d_model << ", " << c.n_layers << " layers, f32)\"\n"
    << "source: \"" << o.command_line << " at " << utc_now() << "; median of " << o.reps
    << " steps per sample after one warm-up; one answer block of " << o.block
    << " tokens, dual cache\"\n"
    << "memory:\n"
    << "  weight_bytes: " << static_cast<double>(c.parameter_count()) * 4 << "\n"
    << "  kv_bytes_per_token: " << 2.0 * c.n_layers * c.kv_dim() * 4 << "\n"
    << "samples:\n";
  for (const auto& s : samples) {
    y << "  - {tp: " << s.tp << ", kind: "
      << (s.refreshing >= 0 ? "mixed" : s.kind == policy::step_kind::refresh ? "refresh" : "reuse");
    if (s.refreshing >= 0) y << ", refreshing: " << s.refreshing;
    y << ", batch: " << s.batch << ", query_rows: " << s.query_rows << ", key_rows: " << s.key_rows
      << ", seconds: " << s.seconds << "}\n";
  }
  return y.str();
}

void check(const profile_options& o, const gpu::model_config& c) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int tp : o.tp) {
    try {
      gpu::slice_for(c, {0, tp});
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("--tp " + std::to_string(tp) + ": " + e.what() + " (" + std::to_string(c.n_heads) +
                                  " heads)");
    }
    if (tp > cores)
      throw std::invalid_argument("--tp " + std::to_string(tp) + ": a TP group needs one core per device slot, this machine has " +
                                  std::to_string(cores));
  }
  if (o.block > c.max_seq - 1)
    throw std::invalid_argument("--block " + std::to_string(o.block) + ": leaves no room for a prompt in the model's " +
                                std::to_string(c.max_seq) + " positions");
  for (int l : o.lengths)
    if (l <= o.block || l > c.max_seq)
      throw std::invalid_argument("--lengths: " + std::to_string(l) + " must be above the block (" + std::to_string(o.block) +
                                  ") and at most the model's max_sequence_length (" + std::to_string(c.max_seq) + ")");
}

constexpr int profile_default_longest = 4096;

int run_profile(profile_options o) {
  auto m = gpu::load_model(o.model);
  const auto& c = m->config;
  // A quarter, half and all of the model's positions, up to the longest canvas the policies are
  // tuned for: Dream's config allows 131072 positions, whose refresh alone would take hours here.
  // A cluster whose limits admit shorter canvases measures only those (`o.longest`).
  const int longest = std::min({c.max_seq, profile_default_longest, o.longest > 0 ? o.longest : c.max_seq});
  if (o.lengths.empty())
    for (int l : {longest / 4, longest / 2, longest})
      if (l > o.block && (o.lengths.empty() || l != o.lengths.back())) o.lengths.push_back(l);
  check(o, c);
  std::vector<point> grid;
  for (int tp : o.tp)
    for (int l : o.lengths)
      for (int b : o.batches) grid.push_back({tp, l, b});
  std::mt19937 rng(12345);
  std::vector<policy::profile_sample> samples;
  progress_bar bar("profile", grid.size());
  for (const auto& pt : grid) {
    for (auto& s : measure(m, o, pt, rng)) samples.push_back(s);
    bar.advance(1, "tp " + std::to_string(pt.tp) + " len " + std::to_string(pt.length) + " batch " + std::to_string(pt.batch));
  }
  bar.finish();
  const auto yaml = to_yaml(o, *m, samples);
  // Fit before writing: a grid the linear model cannot fit is refused with the reason.
  std::vector<policy::fit_report> report;
  policy::fit_linear_step_cost(samples, &report);
  auto& info = o.out.empty() ? std::cerr : std::cout;
  if (o.out.empty()) {
    std::cout << yaml;
  } else {
    std::ofstream f(o.out);
    if (!(f << yaml)) throw std::runtime_error("cannot write " + o.out);
    info << "wrote " << samples.size() << " samples to " << o.out << "\n";
  }
  for (const auto& r : report) {
    char line[160];
    std::snprintf(line, sizeof line, "tp %d: %zu samples, linear fit R^2 %.4f, worst relative error %.1f %%\n", r.tp,
                  r.samples, r.r2, 100 * r.max_rel_error);
    info << line;
  }
  return 0;
}

}  // namespace

void write_profile(const std::string& model, const std::vector<int>& tp, int block, int reps, int longest,
                   const std::string& out) {
  profile_options o;
  o.model = model;
  o.tp = tp;
  o.block = block;
  o.reps = reps;
  o.longest = longest;
  o.out = out;
  o.command_line = "dilaserve up (no scheduler.profile): profile --tp";
  for (std::size_t i = 0; i < tp.size(); ++i) o.command_line += (i ? "," : " ") + std::to_string(tp[i]);
  o.command_line += " --block " + std::to_string(block) + " --reps " + std::to_string(reps);
  if (longest > 0) o.command_line += ", canvases up to " + std::to_string(longest) + " tokens (the cluster's limits)";
  run_profile(o);
}

namespace {

register_command reg{"profile", [](CLI::App& app) {
  auto* sub = app.add_subcommand("profile", "measure step times of the CPU engine into a step-cost profile");
  auto o = std::make_shared<profile_options>();
  sub->add_option("--model", o->model, "model directory (config.json + *.safetensors)");
  sub->add_option("--tp", o->tp, "TP degrees, one device slot (core) each (default 1,2)")
      ->delimiter(',')
      ->check(dls::cli::positive);
  sub->add_option("--lengths", o->lengths,
                  "canvas lengths, prompt + one answer block (default: 1/4, 1/2 and all of the model's positions, at most 4096)")
      ->delimiter(',')
      ->check(dls::cli::positive);
  // At most the largest engine.max_batch a shipped file uses: a batch is that many canvases held at once.
  sub->add_option("--batches", o->batches, "requests per step (default 1,4)")->delimiter(',')->check(CLI::Range(1, 256));
  sub->add_option("--block", o->block, "answer block length (default 8)")->check(dls::cli::positive);
  sub->add_option("--reps", o->reps, "timed steps per sample, the median is kept (default 5)")->check(CLI::Range(1, 1000));
  sub->add_option("--out", o->out, "write the profile here (default: standard output)");
  return std::function<int()>([o, &app] {
    std::string cmd = "dilaserve profile";
    for (const auto* opt : app.get_subcommand("profile")->get_options())
      if (opt->count() > 0 && opt->get_name() != "--help") {
        cmd += " " + opt->get_name() + " ";
        const auto& rs = opt->results();
        for (std::size_t i = 0; i < rs.size(); ++i) cmd += (i ? "," : "") + rs[i];
      }
    o->command_line = cmd;
    return run_profile(*o);
  });
}};

}  // namespace
}  // namespace dls::cli
