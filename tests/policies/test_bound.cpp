// The SLO-attainment bound (policies/bound.hpp) on hand-made cases whose answers are worked
// out in the comments.
#define BOOST_TEST_MODULE policies_bound
#include <boost/test/unit_test.hpp>

#include "fixtures.hpp"
#include "policies/bound.hpp"
#include "policies/predict.hpp"

#include <algorithm>
#include <cstdint>

using namespace dls;
namespace tt = boost::test_tools;

BOOST_AUTO_TEST_CASE(disjoint_bursts_force_one_miss_each) {
  // One device. Burst 1 in [0, 1]: works 0.6, 0.6, 0.3; the cheapest two (0.9) fit, so one
  // of the three misses. Burst 2 in [2, 3]: 0.8, 0.8, one misses. F (0.1 of work over
  // [0.5, 2.5]) lies in neither window and is counted on time. Bound: 6 - 2 = 4 on time.
  std::vector<policy::bound_job> jobs{{0, 1, 0.6}, {0, 1, 0.6}, {0, 1, 0.3},
                                      {2, 3, 0.8}, {2, 3, 0.8}, {0.5, 2.5, 0.1}};
  BOOST_TEST(policy::window_miss_bound(jobs, 1.0) == 2u);
  // The pooled EDF schedule reaches it: it gives up one 0.6 and one 0.8 and runs the rest.
  BOOST_TEST(policy::pooled_edf_on_time(jobs, 1.0) == 4u);
  // Twice the capacity fits everything.
  BOOST_TEST(policy::window_miss_bound(jobs, 2.0) == 0u);
  BOOST_TEST(policy::pooled_edf_on_time(jobs, 2.0) == 6u);
}

BOOST_AUTO_TEST_CASE(the_best_window_can_be_the_union_of_two) {
  // X in [0, 1] and Y in [1, 2] each fit alone (0.8 <= 1), but with Z (0.8 over [0, 2]) the
  // window [0, 2] holds 2.4 of work for 2.0 of capacity: exactly one must miss.
  std::vector<policy::bound_job> jobs{{0, 1, 0.8}, {1, 2, 0.8}, {0, 2, 0.8}};
  BOOST_TEST(policy::window_miss_bound(jobs, 1.0) == 1u);
  BOOST_TEST(policy::pooled_edf_on_time(jobs, 1.0) == 2u);
  // Limiting windows to 1.5 s leaves only [0, 1] and [1, 2], which force nothing.
  BOOST_TEST(policy::window_miss_bound(jobs, 1.0, 1.5) == 0u);
}

BOOST_AUTO_TEST_CASE(a_request_too_big_for_its_own_window_always_misses) {
  // 3 s of work between 0 and 1 on 2 devices (2 s of capacity).
  std::vector<policy::bound_job> jobs{{0, 1, 3.0}, {0, 5, 1.0}};
  BOOST_TEST(policy::window_miss_bound(jobs, 2.0) == 1u);
  BOOST_TEST(policy::pooled_edf_on_time(jobs, 2.0) == 1u);
}

BOOST_AUTO_TEST_CASE(a_request_released_at_its_deadline_always_misses) {
  // Released at (or after) its deadline: no window holds it, yet it cannot be on time; the
  // others are unaffected.
  std::vector<policy::bound_job> jobs{{2, 2, 0.5}, {3, 1, 0.5}, {0, 5, 1.0}};
  BOOST_TEST(policy::window_miss_bound(jobs, 1.0) == 2u);
  BOOST_TEST(policy::pooled_edf_on_time(jobs, 1.0) == 1u);
}

BOOST_AUTO_TEST_CASE(fewest_steps_per_block_under_the_luckiest_rounding) {
  // One token per step: 32 steps. 16 per step: 2 steps (16 + 16).
  BOOST_TEST(policy::min_block_steps(32, 1.0) == 32);
  BOOST_TEST(policy::min_block_steps(32, 16.0) == 2);
  // 10 per step (expected 3.2): planned 3 commits 11, then 2 left for 21 commits 11, then 10: 3.
  BOOST_TEST(policy::min_block_steps(32, 10.0) == 3);
  // 5 per step (expected 6.4): 6 (6+6+5+5+5+5 re-planning each time, or 6+6+5+5+5+5 keeping).
  BOOST_TEST(policy::min_block_steps(32, 5.0) == 6);
  BOOST_TEST(policy::min_block_steps(0, 5.0) == 0);
}

BOOST_AUTO_TEST_CASE(least_step_work_is_compute_only_and_never_above_any_tp) {
  const auto m = test::h100_roofline();
  // A 1,500-token refresh alone on one H100 is compute-bound (37 ms against 6.3 ms of HBM),
  // so its least work is the step time less the 0.3 ms overhead:
  // (2 x 6.98e9 x 1500 + 4 x 32 x 4096 x 1500^2 + 2 x 0.518e9 x 32) / (989.4e12 x 0.6).
  const auto ref = policy::step_item_of(policy::step_kind::refresh, 1500, 32);
  const double flops = 2 * 6.98e9 * 1500 + 4.0 * 32 * 4096 * 1500.0 * 1500 + 2 * 0.518e9 * 32;
  BOOST_TEST(policy::min_step_device_seconds(m, ref) == flops / (989.4e12 * 0.6), tt::tolerance(1e-9));
  BOOST_TEST(policy::min_step_device_seconds(m, ref) ==
                 m.step_seconds(1, std::vector<policy::step_item>{ref}) - 0.3e-3,
             tt::tolerance(1e-9));
  for (auto kind : {policy::step_kind::refresh, policy::step_kind::reuse})
    for (int canvas : {64, 1500, 4096}) {
      const auto it = policy::step_item_of(kind, canvas, 32);
      for (int tp : m.tp_degrees()) {
        // Also per request inside a full batch: k x t(batch) / n >= the least work.
        std::vector<policy::step_item> batch(64, it);
        BOOST_TEST(policy::min_step_device_seconds(m, it) <= tp * m.step_seconds(tp, batch) / 64.0);
      }
    }
  // Linear: tp 1 costs 0.1 + 0.01 x 10 = 0.2 per request, tp 2 costs 2 x (0.04 + 0.004 x 10)
  // = 0.16 device-seconds; the fixed terms are left out.
  auto lin = policy::step_cost_model::make_linear({{1, {1.0, 0.1, 0.01, 0, 0}}, {2, {1.0, 0.04, 0.004, 0, 0}}});
  policy::step_item it;
  it.query_rows = 10;
  it.key_rows = 10;
  BOOST_TEST(policy::min_step_device_seconds(lin, it) == 0.16, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(least_request_work_uses_the_lowest_tau) {
  // Linear, 1 s per query row on tp 1 only; 16 tokens per step at tau 0.7, 8 at 0.9.
  auto lin = policy::step_cost_model::make_linear({{1, {0.0, 0.0, 1.0, 0, 0}}});
  policy::quality_model q({{0.7, 0.7, 16.0}, {0.9, 0.9, 8.0}});
  // Canvas 100 + 64: two blocks, each one refresh (164 rows) + one reuse (32 rows) at tau 0.7.
  BOOST_TEST(policy::min_request_device_seconds(lin, q, 100, 64, 32, 0.7, 0.9) == 2 * (164 + 32),
             tt::tolerance(1e-12));
  // Only tau 0.9 allowed: 4 steps per block, one refresh and three reuses.
  BOOST_TEST(policy::min_request_device_seconds(lin, q, 100, 64, 32, 0.9, 0.9) == 2 * (164 + 3 * 32),
             tt::tolerance(1e-12));
  // An answer that ends in its first block decodes that block only, on the whole canvas.
  BOOST_TEST(policy::min_request_device_seconds(lin, q, 100, 64, 32, 0.7, 0.9, 1) == 164 + 32,
             tt::tolerance(1e-12));
  BOOST_TEST(policy::min_request_device_seconds(lin, q, 100, 64, 32, 0.7, 0.9, 5) == 2 * (164 + 32),
             tt::tolerance(1e-12));
}

namespace {

// Exact optimum of the relaxation for a few jobs: a set fits one preemptive machine of speed m
// iff every interval [r_i, d_j] holds at most m (d_j - r_i) of the set's work (EDF is optimal),
// so try every subset.
std::size_t exact_on_time(const std::vector<policy::bound_job>& jobs, double m) {
  const std::size_t n = jobs.size();
  std::size_t best = 0;
  for (std::uint32_t mask = 0; mask < (1u << n); ++mask) {
    bool ok = true;
    for (std::size_t a = 0; a < n && ok; ++a)
      for (std::size_t b = 0; b < n && ok; ++b) {
        const double lo = jobs[a].release_s, hi = jobs[b].deadline_s;
        double w = 0;
        for (std::size_t k = 0; k < n; ++k)
          if ((mask >> k & 1u) && jobs[k].release_s >= lo && jobs[k].deadline_s <= hi) w += jobs[k].work_s;
        if (w > m * std::max(0.0, hi - lo) + 1e-12) ok = false;
      }
    if (ok) best = std::max<std::size_t>(best, static_cast<std::size_t>(__builtin_popcount(mask)));
  }
  return best;
}

}  // namespace

BOOST_AUTO_TEST_CASE(bound_and_schedule_bracket_the_exact_optimum_on_random_cases) {
  // Deterministic pseudo-random instances (LCG): the EDF schedule can never beat the optimum
  // and the window bound can never be below it.
  std::uint64_t x = 12345;
  auto next = [&] {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(x >> 11) / static_cast<double>(1ULL << 53);
  };
  int tight = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = 3 + static_cast<std::size_t>(next() * 6);  // 3..8 jobs
    std::vector<policy::bound_job> jobs;
    for (std::size_t i = 0; i < n; ++i) {
      const double r = next() * 2.0;
      jobs.push_back({r, r + 0.2 + next() * 1.5, 0.1 + next() * 0.9});
    }
    const double m = 1.0 + static_cast<int>(next() * 2);
    const std::size_t opt = exact_on_time(jobs, m);
    const std::size_t edf = policy::pooled_edf_on_time(jobs, m);
    const std::size_t upper = n - policy::window_miss_bound(jobs, m);
    BOOST_TEST(edf <= opt);
    BOOST_TEST(opt <= upper);
    tight += upper == opt;
  }
  BOOST_TEST_MESSAGE("window bound exact on " << tight << " of 300 random cases");
  BOOST_TEST(tight > 150);  // it is a useful bound, not a vacuous one
}
