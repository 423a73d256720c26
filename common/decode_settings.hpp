#pragma once
// How a request is decoded: the commit rule and its tau, the block and answer lengths, the
// approximate KV cache, sampling. One type for the engine (per request, tau may change between
// any two steps), the cluster file's `engine:` defaults, the running cluster and the simulator.
#include "common/step_kind.hpp"

#include <cstdint>
#include <string>

namespace dls::common {

/// Dream's default eps (DreamGenerationConfig): the timesteps of its schedule end at 1e-3.
inline constexpr double dream_default_eps = 1e-3;

/// The most steps a block may be given (engine.steps_per_block, a request's steps_per_block).
inline constexpr int max_steps_per_block = 8192;

/// How a step picks which masked tokens of the current block to commit.
enum class commit_rule : uint8_t {
  quota,      // LLaDA low-confidence remasking: a fixed number per step (steps_per_block)
  threshold,  // Fast-dLLM: every token with confidence >= tau, plus the top-1
  factor,     // Fast-dLLM dynamic: largest n with c_i >= 1 - f/(i+1) for all i <= n
  // Dream's sampler (alg topk_margin / entropy): a fixed number per step like quota, ranked by
  // another score of each position's distribution than its top-1 probability.
  margin,     // p(top-1) - p(top-2)
  entropy,    // sum p log p (the negative entropy: the most certain position first)
  // Dream's alg 'origin': no ranking; each masked position of the block is committed with
  // Dream's probability 1 - s/t of its step (dream_schedule.hpp), with its proposed token.
  origin,
};

/// How many positions a quota, margin or entropy step commits.
enum class step_schedule : uint8_t {
  even,          // LLaDA's get_num_transfer_tokens: the block's masks spread evenly, at least one a step
  dream_linear,  // Dream's diffusion_generate: int(masks left x (1 - s/t)) over linspace(1, eps), all on the last step
};

/// The per-position score a rule ranks by (what row_proposal::confidence holds).
enum class proposal_score : uint8_t { probability, margin, neg_entropy };
proposal_score score_of(commit_rule r);

/// Fast-dLLM approximate KV cache mode.
enum class cache_mode : uint8_t {
  none,    // every step is a full forward
  prefix,  // reuse: queries = block + suffix, keys of the prefix come from the cache
  dual,    // reuse: queries = block only, prefix and suffix keys come from the cache
};

struct decode_settings {
  int gen_length = 32;
  int block_length = 8;
  commit_rule rule = commit_rule::threshold;
  double threshold = 0.9;
  int steps_per_block = 0;    // quota, margin, entropy, origin: steps per block; 0 means block_length
  double factor = 1.0;
  cache_mode cache = cache_mode::dual;
  int refresh_interval = 0;   // >0: also refresh every N steps inside a block
  double temperature = 0.0;   // 0 = argmax; >0 = Gumbel sampling from softmax(l/T)
  uint64_t seed = 0;
  // Dream's sampler options. top_p and top_k truncate each position's token distribution before
  // the token is chosen and scored (1 and 0: no truncation); alg_temp > 0 draws the positions
  // a quota, margin or entropy step commits from softmax(score / alg_temp) instead of taking the
  // highest scores (0: the highest).
  double top_p = 1.0;
  int top_k = 0;
  double alg_temp = 0.0;
  step_schedule schedule = step_schedule::even;
  // Dream's eps: the last of the timesteps linspace(1, eps, steps + 1) that schedule dream_linear
  // and the origin rule count down (dream_schedule.hpp); it does nothing under other schedules.
  double eps = dream_default_eps;

  /// Whether the rule commits a count set by the schedule (quota, margin, entropy).
  bool counted() const { return rule == commit_rule::quota || rule == commit_rule::margin || rule == commit_rule::entropy; }
  /// Steps a block takes at most under a counted rule or origin.
  int block_steps() const { return steps_per_block > 0 ? steps_per_block : block_length; }

  /// Every how many steps of a block a refresh runs: 1 without a cache, else refresh_interval
  /// (0: at a block's first step only).
  int refresh_period() const { return cache == cache_mode::none ? 1 : refresh_interval; }

  /// Whether a backend must truncate distributions (top_p or top_k set).
  bool truncates() const { return top_p < 1.0 || top_k > 0; }

  /// Returns an empty string when the settings are usable, else a one-line reason.
  std::string validate() const;
};

/// The cluster's decode settings with what a request chose for itself (a submit_spec, a
/// work_item or an HTTP completion request: a negative field, or a gen_length <= 0, keeps the
/// cluster's). Its tau is the caller's: the head's check sees the client's, a group the one its
/// item carries.
template <class Request>
decode_settings with_request(decode_settings d, const Request& r) {
  if (r.gen_length > 0) d.gen_length = r.gen_length;
  if (r.top_p >= 0) d.top_p = r.top_p;
  if (r.top_k >= 0) d.top_k = r.top_k;
  if (r.alg_temp >= 0) d.alg_temp = r.alg_temp;
  if (r.schedule >= 0) d.schedule = static_cast<step_schedule>(r.schedule);
  if (r.eps >= 0) d.eps = r.eps;
  if (r.rule >= 0) d.rule = static_cast<commit_rule>(r.rule);
  if (r.steps_per_block >= 0) d.steps_per_block = r.steps_per_block;
  return d;
}

const char* to_string(commit_rule r);
const char* to_string(cache_mode c);
const char* to_string(step_schedule s);
const char* to_string(step_kind k);
/// Parse from the CLI/config spelling; throw std::invalid_argument naming the bad value.
commit_rule parse_commit_rule(const std::string& s);
cache_mode parse_cache_mode(const std::string& s);
step_schedule parse_step_schedule(const std::string& s);

}  // namespace dls::common
