#pragma once
// The bounds every submitted request must meet, checked by the first process that
// receives it (the CLI before sending, the head when it accepts a submit), so that an
// absurd request is refused with one line instead of travelling to a node and failing
// (or allocating) there. Arithmetic is in 64 bits: no sum of two 32-bit fields wraps.
#include <cstdint>
#include <functional>
#include <string>

namespace dls::runtime {

/// Configured in the cluster YAML under `limits:` (docs/config.md).
struct request_limits {
  // Bytes of prompt text. 1 MiB is 256 Ki tokens at 4 bytes per token, beyond any context a
  // supported model has, and small enough that a refused prompt costs nothing to receive.
  int64_t max_prompt_bytes = int64_t{1} << 20;
  int64_t max_prompt_tokens = 0;  // 0: whatever the model's context leaves after the answer
  int64_t max_gen_length = 0;     // 0: the model's context
};

/// What a checker knows of the model; zeros where it could not read the model (then the
/// nodes, which always can, still refuse a request that does not fit).
struct model_bounds {
  int64_t max_seq = 0;  // tokens of prompt plus answer (config.json)
  std::function<int64_t(const std::string&)> count_tokens;  // empty: tokens are not checked here
};

class request_checker {
 public:
  request_checker(request_limits limits, int64_t default_gen_length, model_bounds model);

  /// Empty when the request is acceptable, else one line naming the field and the bound.
  /// `threshold` < 0 and `gen_length` <= 0 mean the cluster default (the wire convention).
  std::string check(const std::string& prompt, double threshold, int64_t gen_length) const;

  const request_limits& limits() const { return limits_; }
  int64_t max_seq() const { return model_.max_seq; }

 private:
  request_limits limits_;
  int64_t default_gen_length_;
  model_bounds model_;
};

}  // namespace dls::runtime
