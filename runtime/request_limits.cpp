#include "runtime/request_limits.hpp"

#include <cmath>
#include <sstream>

namespace dls::runtime {

request_checker::request_checker(request_limits limits, int64_t default_gen_length, model_bounds model)
    : limits_(limits), default_gen_length_(default_gen_length), model_(std::move(model)) {}

std::string request_checker::check(const std::string& prompt, double threshold, int64_t gen_length) const {
  if (prompt.empty()) return "the prompt is empty; give the text the answer should follow";
  auto bytes = static_cast<int64_t>(prompt.size());
  if (bytes > limits_.max_prompt_bytes)
    return "the prompt is " + std::to_string(bytes) + " bytes; this cluster accepts at most " +
           std::to_string(limits_.max_prompt_bytes) + " (limits.max_prompt_bytes)";
  if (std::isnan(threshold)) return "threshold is NaN; give a number in [0, 1]";
  if (std::isinf(threshold) || threshold > 1.0) {
    std::ostringstream os;
    os << "threshold " << threshold << " is outside [0, 1]";
    return os.str();
  }
  int64_t gen = gen_length > 0 ? gen_length : default_gen_length_;
  if (limits_.max_gen_length > 0 && gen > limits_.max_gen_length)
    return "gen_length " + std::to_string(gen) + " exceeds this cluster's limit of " +
           std::to_string(limits_.max_gen_length) + " tokens (limits.max_gen_length)";
  if (model_.max_seq > 0 && gen > model_.max_seq)
    return "gen_length " + std::to_string(gen) + " exceeds the model's context of " + std::to_string(model_.max_seq) +
           " tokens";
  if (!model_.count_tokens) return {};
  int64_t tokens = model_.count_tokens(prompt);
  if (limits_.max_prompt_tokens > 0 && tokens > limits_.max_prompt_tokens)
    return "the prompt is " + std::to_string(tokens) + " tokens; this cluster accepts at most " +
           std::to_string(limits_.max_prompt_tokens) + " (limits.max_prompt_tokens)";
  if (model_.max_seq > 0 && tokens + gen > model_.max_seq)
    return "the prompt (" + std::to_string(tokens) + " tokens) plus gen_length " + std::to_string(gen) +
           " exceeds the model's context of " + std::to_string(model_.max_seq) + " tokens";
  return {};
}

}  // namespace dls::runtime
