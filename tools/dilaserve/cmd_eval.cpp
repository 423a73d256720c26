// dilaserve eval: accuracy and tokens per step of a model on its eval set.
#include "dilaserve/command_registry.hpp"
#include "dilaserve/validators.hpp"
#include "dilaserve/decode_options.hpp"
#include "dilaserve/progress.hpp"
#include "gpu/cpu_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/eval_set.hpp"
#include "gpu/model.hpp"
#include "gpu/tokenizer.hpp"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

namespace dls::cli {
namespace {

struct eval_options {
  decode_flags decode;
  std::string eval_file;
  int n = 0;
  int batch = 16;
  bool json = false;
  // A tau switch within each answer: from block `after_blocks` (or after `after_steps` steps)
  // on, a request commits at `then_threshold`. It measures how the loss of a request lowered
  // for part of its answer compares with the loss of one decoded at either tau throughout
  // (the accuracy budget's charge rests on it).
  std::optional<double> then_threshold;
  std::optional<int> after_blocks;
  std::optional<int> after_steps;
  bool switched(const gpu::canvas& c) const {
    return after_blocks ? c.block >= *after_blocks : c.steps >= *after_steps;
  }
};

struct tally {
  int n = 0, correct = 0;
  long long steps = 0, committed = 0, refresh = 0, reuse = 0;
  void add(const gpu::canvas& c, bool ok) {
    ++n;
    correct += ok;
    steps += c.steps;
    committed += c.committed;
    refresh += c.refresh_steps;
    reuse += c.reuse_steps;
  }
  double accuracy() const { return n ? static_cast<double>(correct) / n : 0.0; }
  double tps() const { return steps ? static_cast<double>(committed) / static_cast<double>(steps) : 0.0; }
  nlohmann::json to_json() const {
    return {{"n", n}, {"accuracy", accuracy()}, {"tokens_per_step", tps()},
            {"steps", n ? static_cast<double>(steps) / n : 0.0}};
  }
};

// How many steps each block took: entry k counts the blocks decoded in k + 1 steps. The
// policies need the spread, not only the mean, to know how many steps an in-block
// refresh_interval turns into refreshes (quality_model::refresh_share).
class block_step_counter {
 public:
  void before(const std::vector<gpu::request_slot*>& active) {
    was_.clear();
    for (const auto* s : active) was_.push_back({s->c.block, s->c.step_in_block});
  }
  void after(const std::vector<gpu::request_slot*>& active) {
    for (std::size_t i = 0; i < active.size(); ++i) {
      const auto& c = active[i]->c;
      if (c.block == was_[i].first && !c.finished) continue;
      const auto steps = static_cast<std::size_t>(was_[i].second) + 1;
      if (counts_.size() < steps) counts_.resize(steps, 0);
      ++counts_[steps - 1];
    }
  }
  const std::vector<long long>& counts() const { return counts_; }

 private:
  std::vector<std::pair<int, int>> was_;
  std::vector<long long> counts_;
};

int run_eval(const eval_options& o) {
  if (o.then_threshold.has_value() != (o.after_blocks.has_value() != o.after_steps.has_value()))
    throw std::invalid_argument("--then-threshold goes with one of --after-blocks and --after-steps");
  if (o.then_threshold && (o.decode.one_per_step || (!o.decode.rule.empty() && o.decode.rule != "threshold")))
    throw std::invalid_argument("--then-threshold needs the threshold rule");
  const std::string file = o.eval_file.empty() ? o.decode.model + "/eval.jsonl" : o.eval_file;
  auto problems = gpu::load_eval_set(file);
  if (o.n > 0 && static_cast<std::size_t>(o.n) < problems.size()) problems.resize(static_cast<std::size_t>(o.n));
  if (problems.empty()) throw std::invalid_argument(file + ": no problems");
  auto model = gpu::load_model(o.decode.model);
  auto tok = gpu::load_tokenizer(o.decode.model);
  gpu::engine eng(o.decode.make_backend(model));
  std::vector<gpu::request_slot> slots;
  for (const auto& p : problems) {
    auto params = o.decode.params(p.gen_length > 0 ? p.gen_length : 32);
    if (o.decode.gen_length) params.gen_length = *o.decode.gen_length;
    slots.push_back(eng.admit(gpu::canvas::start(tok->encode(p.prompt), params, model->config.mask_id,
                                                 model->config.eos_id)));
  }
  progress_bar bar("eval", slots.size(), !o.json);
  auto t0 = std::chrono::steady_clock::now();
  // Batched like the serving loop: the unfinished requests step together.
  std::size_t next = 0, done = 0;
  std::vector<gpu::request_slot*> active;
  std::vector<int64_t> committed_late(slots.size(), 0);
  block_step_counter blocks;
  while (true) {
    std::vector<gpu::request_slot*> keep;
    for (auto* s : active) {
      if (s->c.finished) {
        ++done;
        bar.advance();
      } else {
        keep.push_back(s);
      }
    }
    active.swap(keep);
    while (static_cast<int>(active.size()) < o.batch && next < slots.size()) active.push_back(&slots[next++]);
    if (active.empty()) break;
    if (!o.then_threshold) {
      blocks.before(active);
      eng.step(active);
      blocks.after(active);
      continue;
    }
    std::vector<std::pair<gpu::request_slot*, int64_t>> late;  // committing at the second tau
    for (auto* s : active) {
      const bool then = o.switched(s->c);
      s->c.set_threshold(then ? *o.then_threshold : o.decode.threshold);
      if (then) late.push_back({s, s->c.committed});
    }
    blocks.before(active);
    eng.step(active);
    blocks.after(active);
    for (auto& [s, before] : late) committed_late[static_cast<std::size_t>(s - slots.data())] += s->c.committed - before;
  }
  bar.finish();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  tally all;
  std::map<std::string, tally> per;
  for (std::size_t i = 0; i < problems.size(); ++i) {
    bool ok = problems[i].accepts(tok->decode(slots[i].c.answer()));
    all.add(slots[i].c, ok);
    per[problems[i].task].add(slots[i].c, ok);
  }
  nlohmann::json j = all.to_json();
  auto params = o.decode.params(32);
  j["threshold"] = params.rule == gpu::commit_rule::threshold ? nlohmann::json(params.threshold) : nlohmann::json();
  if (o.then_threshold) {
    j["then_threshold"] = *o.then_threshold;
    if (o.after_blocks) j["after_blocks"] = *o.after_blocks;
    else j["after_steps"] = *o.after_steps;
    // The two predictions of a lowering to compare with the measured accuracy: a loss additive
    // over tokens gives acc(first) - then_share x (acc(first) - acc(second)), a loss at the
    // lowest tau committed gives acc(first) - then_requests x (acc(first) - acc(second)).
    double share = 0, reached = 0;
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].c.committed > 0) share += static_cast<double>(committed_late[i]) / static_cast<double>(slots[i].c.committed);
      reached += committed_late[i] > 0 ? 1 : 0;
    }
    j["then_share"] = share / static_cast<double>(slots.size());
    j["then_requests"] = reached / static_cast<double>(slots.size());
  }
  j["rule"] = o.decode.one_per_step ? "one-per-step" : gpu::to_string(params.rule);
  j["cache"] = o.decode.cache;
  j["block_length"] = params.block_length;
  j["refresh_interval"] = params.refresh_interval;
  j["block_steps"] = blocks.counts();
  j["refresh_steps"] = all.refresh;
  j["reuse_steps"] = all.reuse;
  j["seconds"] = secs;
  j["tokens_per_second"] = secs > 0 ? static_cast<double>(all.committed) / secs : 0.0;
  j["per_task"] = nlohmann::json::object();
  for (const auto& [task, t] : per) j["per_task"][task] = t.to_json();
  if (o.json) {
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::string label = o.decode.label();
  if (o.then_threshold) {
    char then[64];
    if (o.after_blocks) std::snprintf(then, sizeof then, ", then tau=%g from block %d", *o.then_threshold, *o.after_blocks);
    else std::snprintf(then, sizeof then, ", then tau=%g after %d steps", *o.then_threshold, *o.after_steps);
    label += then;
  }
  std::printf("%s on %zu problems (%s)\n", o.decode.model.c_str(), problems.size(), label.c_str());
  std::printf("  %-8s %6s %9s %12s %8s\n", "task", "n", "accuracy", "tokens/step", "steps");
  for (const auto& [task, t] : per)
    std::printf("  %-8s %6d %8.1f%% %12.2f %8.2f\n", task.c_str(), t.n, 100 * t.accuracy(), t.tps(),
                static_cast<double>(t.steps) / t.n);
  std::printf("  %-8s %6d %8.1f%% %12.2f %8.2f\n", "all", all.n, 100 * all.accuracy(), all.tps(),
              static_cast<double>(all.steps) / all.n);
  std::printf("  refresh %lld, reuse %lld steps; %.2f s, %.0f tokens/s\n", all.refresh, all.reuse, secs,
              j["tokens_per_second"].get<double>());
  std::printf("  blocks by steps:");
  for (std::size_t k = 0; k < blocks.counts().size(); ++k)
    if (blocks.counts()[k] > 0) std::printf(" %zu:%lld", k + 1, blocks.counts()[k]);
  std::printf("\n");
  return 0;
}

register_command reg{"eval", [](CLI::App& app) {
  auto* sub = app.add_subcommand("eval", "accuracy and tokens per step on the model's eval set");
  auto o = std::make_shared<eval_options>();
  o->decode.add_to(sub);
  sub->add_option("--eval-file", o->eval_file, "eval set (default: <model>/eval.jsonl)");
  sub->add_option("--n", o->n, "only the first N problems")->check(dls::cli::non_negative);
  sub->add_option("--batch", o->batch, "requests per batched step")->check(dls::cli::positive);
  sub->add_flag("--json", o->json, "print one JSON object");
  sub->add_option("--then-threshold", o->then_threshold, "tau of the blocks from --after-blocks on (threshold rule)")
      ->check(dls::cli::unit_interval);
  sub->add_option("--after-blocks", o->after_blocks, "answer blocks decoded at --threshold before --then-threshold")
      ->check(dls::cli::non_negative);
  sub->add_option("--after-steps", o->after_steps, "steps decoded at --threshold before --then-threshold")
      ->check(dls::cli::non_negative);
  return std::function<int()>([o] { return run_eval(*o); });
}};

}  // namespace
}  // namespace dls::cli
