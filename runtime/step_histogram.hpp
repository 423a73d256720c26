#pragma once
// Step wall times of a TP group by kind, as bucket counts: the group accumulates them and
// reports them to the head with its load (no message per step); the gateway exports them as
// the Prometheus histogram dilaserve_step_duration_seconds{kind}. One definition of the buckets
// for both sides.
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <vector>

namespace dls::runtime {

/// Upper bounds in seconds: from a tiny model's sub-millisecond CPU step to an 8B model's
/// long refresh under a full batch (about a second).
inline constexpr std::array<double, 12> step_time_bounds_s{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                                           0.05,   0.1,   0.2,   0.5,   1.0,  2.0};

struct step_histogram {
  std::vector<uint64_t> counts = std::vector<uint64_t>(step_time_bounds_s.size() + 1, 0);  // last: +Inf
  uint64_t count = 0;
  double sum_s = 0;

  void observe(double seconds) {
    std::size_t i = 0;
    while (i < step_time_bounds_s.size() && seconds > step_time_bounds_s[i]) ++i;
    ++counts[i];
    ++count;
    sum_s += seconds;
  }
  nlohmann::json to_json() const { return {{"counts", counts}, {"count", count}, {"sum_s", sum_s}}; }
  /// Reads what to_json wrote; a malformed value gives an empty histogram.
  static step_histogram from_json(const nlohmann::json& j) {
    step_histogram h;
    if (!j.is_object() || !j.contains("counts") || !j["counts"].is_array() ||
        j["counts"].size() != h.counts.size())
      return h;
    for (std::size_t i = 0; i < h.counts.size(); ++i)
      h.counts[i] = j["counts"][i].is_number_unsigned() ? j["counts"][i].get<uint64_t>() : 0;
    h.count = j.value("count", uint64_t{0});
    h.sum_s = j.value("sum_s", 0.0);
    return h;
  }
};

}  // namespace dls::runtime
