#include "actors/liveness.hpp"

#include <algorithm>

namespace dls::actors {

namespace {
// The clock's tick past the limit: silence must be strictly longer than dead_after, and a check
// scheduled exactly at the limit would find the node still alive and wait a whole period.
constexpr auto past_the_limit = std::chrono::milliseconds(1);
}  // namespace

bool silent_too_long(liveness_clock::time_point last_beat, liveness_clock::time_point now,
                     std::chrono::milliseconds dead_after) {
  return now - last_beat > dead_after;
}

liveness_clock::time_point next_liveness_check(liveness_clock::time_point now,
                                               const std::vector<liveness_clock::time_point>& last_beats,
                                               std::chrono::milliseconds dead_after, std::chrono::milliseconds period) {
  auto next = now + period;
  for (auto beat : last_beats) next = std::min(next, beat + dead_after + past_the_limit);
  return std::max(next, now + past_the_limit);
}

}  // namespace dls::actors
