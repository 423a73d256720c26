#pragma once
// When the head declares a silent node DEAD. Checking only at a fixed period declared a node up
// to one period late (with the default 500 ms heartbeat, 3250 ms after its last beat instead of
// 3000); the head instead schedules its next check at the first moment a live node's silence
// can pass the limit.
#include <chrono>
#include <vector>

namespace dls::actors {

using liveness_clock = std::chrono::steady_clock;

/// True once a node whose last heartbeat arrived at `last_beat` has been silent for longer than
/// `dead_after`.
bool silent_too_long(liveness_clock::time_point last_beat, liveness_clock::time_point now,
                     std::chrono::milliseconds dead_after);

/// When to check again: after `period` (the directory's age eviction runs on the same check),
/// or as soon as one of the live nodes' `last_beats` becomes older than `dead_after`, whichever
/// comes first; never at `now` itself.
liveness_clock::time_point next_liveness_check(liveness_clock::time_point now,
                                               const std::vector<liveness_clock::time_point>& last_beats,
                                               std::chrono::milliseconds dead_after, std::chrono::milliseconds period);

}  // namespace dls::actors
