#include "common/decode_settings.hpp"

#include <cmath>
#include <stdexcept>

namespace dls::common {

std::string decode_settings::validate() const {
  if (gen_length <= 0) return "gen_length must be positive";
  if (block_length <= 0) return "block_length must be positive";
  if (steps_per_block < 0) return "steps_per_block must be >= 0";
  if (refresh_interval < 0) return "refresh_interval must be >= 0";
  if (temperature < 0) return "temperature must be >= 0";
  if (!(threshold >= 0.0 && threshold <= 1.0)) return "threshold must lie in [0, 1]";
  if (!(factor > 0.0)) return "factor must be positive";
  if (!(top_p > 0.0 && top_p <= 1.0)) return "top_p must lie in (0, 1]";
  if (top_k < 0) return "top_k must be >= 0 (0: no top-k truncation)";
  if (!(alg_temp >= 0.0) || std::isinf(alg_temp)) return "alg_temp must be a finite number >= 0";
  if (alg_temp > 0.0 && !counted())
    return std::string("alg_temp samples the positions of a fixed number of commits: it needs the quota, margin or "
                       "entropy rule, not ") + to_string(rule);
  if (schedule == step_schedule::dream_linear && !counted() && rule != commit_rule::origin)
    return std::string("schedule dream_linear sets how many a quota, margin or entropy step commits; the ") +
           to_string(rule) + " rule chooses its own count";
  if (!(eps >= 0.0 && eps < 1.0)) return "eps must lie in [0, 1) (Dream's last timestep; default 0.001)";
  if (eps != dream_default_eps && schedule != step_schedule::dream_linear && rule != commit_rule::origin)
    return std::string("eps sets the timesteps of schedule dream_linear and of the origin rule; with the ") +
           to_string(rule) + " rule and schedule even it would change nothing";
  return {};
}

const char* to_string(commit_rule r) {
  switch (r) {
    case commit_rule::quota: return "quota";
    case commit_rule::threshold: return "threshold";
    case commit_rule::factor: return "factor";
    case commit_rule::margin: return "margin";
    case commit_rule::entropy: return "entropy";
    case commit_rule::origin: return "origin";
  }
  return "?";
}

proposal_score score_of(commit_rule r) {
  if (r == commit_rule::margin) return proposal_score::margin;
  if (r == commit_rule::entropy) return proposal_score::neg_entropy;
  return proposal_score::probability;
}

const char* to_string(cache_mode c) {
  switch (c) {
    case cache_mode::none: return "none";
    case cache_mode::prefix: return "prefix";
    case cache_mode::dual: return "dual";
  }
  return "?";
}

const char* to_string(step_kind k) { return k == step_kind::refresh ? "refresh" : "reuse"; }

commit_rule parse_commit_rule(const std::string& s) {
  if (s == "quota") return commit_rule::quota;
  if (s == "threshold") return commit_rule::threshold;
  if (s == "factor") return commit_rule::factor;
  if (s == "margin") return commit_rule::margin;
  if (s == "entropy") return commit_rule::entropy;
  if (s == "origin") return commit_rule::origin;
  throw std::invalid_argument("unknown commit rule '" + s + "' (quota, threshold, factor, margin, entropy, origin)");
}

const char* to_string(step_schedule s) { return s == step_schedule::dream_linear ? "dream_linear" : "even"; }

step_schedule parse_step_schedule(const std::string& s) {
  if (s == "even") return step_schedule::even;
  if (s == "dream_linear") return step_schedule::dream_linear;
  throw std::invalid_argument("unknown schedule '" + s + "' (even, dream_linear)");
}

cache_mode parse_cache_mode(const std::string& s) {
  if (s == "none") return cache_mode::none;
  if (s == "prefix") return cache_mode::prefix;
  if (s == "dual") return cache_mode::dual;
  throw std::invalid_argument("unknown cache mode '" + s + "' (none, prefix, dual)");
}

}  // namespace dls::common
