// The head's liveness check, on a simulated clock: a node that stops beating is declared DEAD
// within a millisecond of its silence passing heartbeat.dead_after_ms, whatever the phase of
// the check period, and never while it beats.
#define BOOST_TEST_MODULE test_runtime_liveness
#include <boost/test/unit_test.hpp>

#include "actors/liveness.hpp"

using namespace std::chrono_literals;
using dls::actors::liveness_clock;
using dls::actors::next_liveness_check;
using dls::actors::silent_too_long;

namespace {

// Runs the head's check chain from t0 (one check, then each at next_liveness_check) against a
// node that beats every 500 ms from `first_beat` until `stop`, and returns how long after its
// last beat it is declared DEAD (the cluster file's defaults: 500 ms beats, DEAD after 3000 ms,
// checks at least every 250 ms).
std::chrono::milliseconds detection_after_last_beat(std::chrono::milliseconds first_beat, std::chrono::milliseconds stop) {
  const liveness_clock::time_point t0{};
  const auto interval = 500ms, dead_after = 3000ms, period = 250ms;
  const auto last = first_beat + ((stop - first_beat) / interval) * interval;
  auto check = t0;
  for (int i = 0; i < 100000; ++i) {
    auto since = std::min(std::chrono::duration_cast<std::chrono::milliseconds>(check - t0), last);
    auto beat = t0 + (since < first_beat ? 0ms : first_beat + ((since - first_beat) / interval) * interval);
    if (silent_too_long(beat, check, dead_after))
      return std::chrono::duration_cast<std::chrono::milliseconds>(check - (t0 + last));
    check = next_liveness_check(check, {beat}, dead_after, period);
  }
  throw std::runtime_error("never declared DEAD");
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_silent_node_is_declared_dead_one_tick_after_the_limit_at_any_phase) {
  // Beats at every millisecond phase against the 250 ms check period (a fixed period declared
  // the node DEAD 3001 to 3250 ms after its last beat, depending on this phase).
  for (auto phase = 0ms; phase < 500ms; phase += 1ms) {
    BOOST_TEST_CONTEXT("beats at " << phase.count() << " ms + k * 500 ms") {
      BOOST_TEST(detection_after_last_beat(phase, 10s).count() == 3001);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_beating_node_is_never_declared_dead) {
  const liveness_clock::time_point t0{};
  for (auto now = t0; now < t0 + 60s; now += 1ms) {
    auto beat = t0 + ((now - t0) / 500ms) * 500ms;
    BOOST_TEST_REQUIRE(!silent_too_long(beat, now, 3000ms));
  }
}

BOOST_AUTO_TEST_CASE(the_next_check_is_the_period_or_the_first_deadline_and_never_now) {
  const liveness_clock::time_point t{std::chrono::hours(1)};
  BOOST_TEST((next_liveness_check(t, {}, 3000ms, 250ms) == t + 250ms));                  // no live node
  BOOST_TEST((next_liveness_check(t, {t - 100ms}, 3000ms, 250ms) == t + 250ms));         // far from its limit
  BOOST_TEST((next_liveness_check(t, {t - 2900ms, t - 10ms}, 3000ms, 250ms) == t + 101ms));  // the earliest limit
  BOOST_TEST((next_liveness_check(t, {t - 5000ms}, 3000ms, 250ms) == t + 1ms));          // already past: not a busy loop
  BOOST_TEST(!silent_too_long(t - 3000ms, t, 3000ms));  // exactly the limit is not past it
  BOOST_TEST(silent_too_long(t - 3001ms, t, 3000ms));
}
