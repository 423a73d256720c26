#include "actors/request_admission.hpp"

#include "gpu/model_config.hpp"
#include "gpu/tokenizer.hpp"

#include <cmath>
#include <exception>

namespace dls::actors {

std::shared_ptr<const runtime::request_checker> make_request_checker(const runtime::cluster_config& cfg,
                                                                     std::string* problem) {
  runtime::model_bounds model;
  try {
    model.max_seq = gpu::load_model_config(cfg.model_path + "/config.json").max_seq;
    std::shared_ptr<const gpu::tokenizer> tok = gpu::load_tokenizer(cfg.model_path);
    model.count_tokens = [tok](const std::string& text) { return static_cast<int64_t>(tok->encode(text).size()); };
  } catch (const std::exception& e) {
    model = {};
    if (problem) *problem = e.what();
  }
  return std::make_shared<const runtime::request_checker>(cfg.limits, cfg.engine.decode.gen_length, std::move(model));
}

std::optional<runtime::answer> refusal(const runtime::request_checker& checker, const common::decode_settings& engine,
                                       const runtime::submit_spec& spec) {
  auto why = checker.check(spec.prompt, spec.threshold, spec.gen_length);
  // The floor is a threshold too: the same NaN and range rules apply (negative: none).
  if (why.empty() && (std::isnan(spec.min_threshold) || spec.min_threshold > 1.0))
    why = "min_threshold must be a number in [0, 1]";
  // Negative sampler options mean the cluster's; the rest must be what decode_settings accepts.
  if (why.empty() && (std::isnan(spec.top_p) || spec.top_p == 0.0 || spec.top_p > 1.0))
    why = "top_p must lie in (0, 1]";
  if (why.empty() && !std::isfinite(spec.alg_temp)) why = "alg_temp must be a finite number >= 0";
  if (why.empty() && spec.schedule > static_cast<int32_t>(common::step_schedule::dream_linear))
    why = "schedule must be even (0) or dream_linear (1)";
  if (why.empty() && (std::isnan(spec.eps) || spec.eps >= 1.0)) why = "eps must lie in [0, 1)";
  if (why.empty() && spec.rule > static_cast<int32_t>(common::commit_rule::origin))
    why = "rule must be a commit rule: quota (0), threshold (1), factor (2), margin (3), entropy (4) or origin (5)";
  if (why.empty() && spec.steps_per_block > common::max_steps_per_block)
    why = "steps_per_block must lie in [0, " + std::to_string(common::max_steps_per_block) + "]";
  // Each field alone is in range; together with the cluster's settings for the fields the
  // request leaves to it they must still be one decode the engine runs (alg_temp or
  // dream_linear under a threshold rule, eps that would change nothing, ...).
  if (why.empty()) {
    auto combined = runtime::with_request(engine, spec);
    if (spec.threshold >= 0) combined.threshold = spec.threshold;
    why = combined.validate();
  }
  if (why.empty()) return std::nullopt;
  runtime::answer a;
  a.error = "refused by the head: " + why;
  a.tag = spec.tag;
  return a;
}

}  // namespace dls::actors
