// One line of a `dilaserve submit --file` JSONL file: a bad line must end in std::runtime_error
// naming the line; an accepted one must carry only in-range values.
#include "runtime/submit_line.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  dls::runtime::submit_spec defaults;
  try {
    const auto parsed = dls::runtime::parse_submit_line(line, defaults, "fuzz.jsonl:1: ");
    if (!parsed) return 0;
    const auto& s = parsed->spec;
    if (s.threshold > 1.0 || s.min_threshold > 1.0 || s.gen_length < 0 || s.slo_ms < 0) std::abort();
    if (parsed->at_s != -1 && !(parsed->at_s >= 0 && parsed->at_s <= 86400)) std::abort();
    // Dream's sampler options: the defaults' (-1) or what decode_settings::validate accepts.
    if (s.top_p != -1 && !(s.top_p > 0 && s.top_p <= 1)) std::abort();
    if (s.top_k < -1) std::abort();
    if (s.alg_temp != -1 && !(s.alg_temp >= 0 && std::isfinite(s.alg_temp))) std::abort();
    if (s.schedule < -1 || s.schedule > 1) std::abort();
    if (s.eps != -1 && !(s.eps >= 0 && s.eps < 1)) std::abort();
    // The commit rule and its steps per block: the defaults' (-1) or in decode_settings' ranges.
    if (s.rule < -1 || s.rule > static_cast<int32_t>(dls::common::commit_rule::origin)) std::abort();
    if (s.steps_per_block < -1 || s.steps_per_block > dls::common::max_steps_per_block) std::abort();
  } catch (const std::runtime_error&) {
  }
  return 0;
}
