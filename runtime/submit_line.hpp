#pragma once
// One line of a `dilaserve submit --file` JSONL file: {"prompt": ..., ["threshold", "min_threshold",
// "gen_length", "slo_ms", "at_s", "answer" | "valid", "top_p", "top_k", "alg_temp", "schedule", "eps",
// "commit", "steps_per_block"]}. Out-of-range numbers and unknown names are refused, never replaced
// by a default, so a typo cannot silently change what is measured.
#include "runtime/messages.hpp"

#include <optional>
#include <string>
#include <vector>

namespace dls::runtime {

struct submit_line {
  submit_spec spec;
  std::vector<std::string> valid;  // acceptable answers, when the line gives them
  double at_s = -1;                // when to send it, in seconds after the first send (a replayed trace); -1: not given
};

/// Parses `line` on top of `defaults` (the command-line flags). Returns nullopt for a blank line.
/// Throws std::runtime_error whose message starts with `where` ("FILE:LINE: ") and names the field.
std::optional<submit_line> parse_submit_line(const std::string& line, const submit_spec& defaults,
                                             const std::string& where);

}  // namespace dls::runtime
