#define BOOST_TEST_MODULE policies_scheduling
#include <boost/test/unit_test.hpp>

#include "fixtures.hpp"
#include "policies/group_step.hpp"
#include "policies/predict.hpp"
#include "policies/scheduler.hpp"
#include "policies/threshold.hpp"

using namespace dls;
using policy::step_kind;
namespace tt = boost::test_tools;

namespace {
policy::request_view in_reuse(policy::request_view r) {
  r.steps_in_block = 1;
  r.masks_left_in_block = 16;
  r.next_kind = step_kind::reuse;
  return r;
}

// Overhead-bound steps (a small model on a CPU, flat_cost(0.005, 1e-5): 5 ms fixed + 10 us
// per query row). Request 1 is urgent: a 32-row reuse step (5.32 ms alone) and 0.18 ms of slack
// after it; every other one is a 48-row refresh that adds 0.48 ms, more than that slack, and
// would cost 5.48 ms alone.
std::vector<policy::request_view> urgent_reuse_and_three_refreshes() {
  std::vector<policy::request_view> a{in_reuse(test::request(1, 0, 0.0055, 16, 32))};
  for (uint64_t id = 2; id <= 4; ++id) a.push_back(test::request(id, 0, 10.0, 16, 32));
  return a;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(deadline_scheduler)

BOOST_AUTO_TEST_CASE(fcfs_fills_the_token_budget_in_arrival_order) {
  auto q = test::two_step_quality();
  policy::scheduler_config cfg;
  cfg.order = policy::queue_order::fcfs;
  cfg.token_budget = 8192;
  // Three refreshes of 3,000 rows: only two fit; arrival order decides, not slack.
  std::vector<policy::request_view> a{test::request(7, 0.2, 0.3, 2968, 32),
                                      test::request(8, 0.1, 9.0, 2968, 32),
                                      test::request(9, 0.3, 0.31, 2968, 32)};
  std::vector<int> out;
  policy::form_batch(a, 0.3, cfg, q, 0.01, out);
  BOOST_TEST(out == std::vector<int>({1, 0}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(least_slack_first_and_small_requests_fill_gaps) {
  auto q = test::two_step_quality();
  policy::scheduler_config cfg;
  cfg.token_budget = 8192;
  cfg.demote_late = false;
  // Slack = deadline - now - 2 steps x 0.01: ids 1, 2 are tight, 3 is loose. 1 and 3 are
  // 5,000-row refreshes, so after 2 (5,000) the next refresh overflows and a reuse fills in.
  std::vector<policy::request_view> a{test::request(1, 0, 0.30, 4968, 32), test::request(2, 0, 0.25, 4968, 32),
                                      test::request(3, 0, 5.00, 4968, 32), in_reuse(test::request(4, 0, 9, 100, 32))};
  std::vector<int> out;
  policy::form_batch(a, 0.0, cfg, q, 0.01, out);
  BOOST_TEST(out == std::vector<int>({1, 3}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(late_requests_go_after_every_on_time_one) {
  auto q = test::two_step_quality();
  policy::scheduler_config cfg;
  cfg.token_budget = 5000;
  // id 1 already missed (deadline before now): plain least slack would serve it first.
  std::vector<policy::request_view> a{test::request(1, 0, 0.5, 4968, 32), test::request(2, 0, 2.0, 4968, 32)};
  std::vector<int> out;
  // id 1 is one whole SLO window (0.5 s) past its deadline, so by default it is the oldest
  // missed request and leads the step (test_tail.cpp); without that rule it goes last.
  policy::form_batch(a, 1.0, cfg, q, 0.01, out);
  BOOST_TEST(out == std::vector<int>({0}), tt::per_element());
  cfg.oldest_missed_first = false;
  policy::form_batch(a, 1.0, cfg, q, 0.01, out);
  BOOST_TEST(out == std::vector<int>({1}), tt::per_element());
  cfg.demote_late = false;
  policy::form_batch(a, 1.0, cfg, q, 0.01, out);
  BOOST_TEST(out == std::vector<int>({0}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(slack_budget_defers_a_refresh_that_would_make_an_urgent_request_miss) {
  auto q = test::two_step_quality();
  auto cost = test::flat_cost(0.001, 1e-5);  // 1 ms + 10 us per query row
  policy::scheduler_config cfg;
  // Urgent: one reuse step left (16 masks = 1 step), alone it takes 1.32 ms, slack 5 ms.
  // Loose: a 4,096-row refresh would add 41 ms to the shared step.
  const double now = 0.0, step_s = 0.0;
  std::vector<policy::request_view> a{in_reuse(test::request(1, 0, 0.005, 4064, 32)),
                                      test::request(2, 0, 10.0, 4064, 32)};
  std::vector<int> out;
  policy::form_batch(a, now, cfg, q, step_s, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({0}), tt::per_element());
  // With room in the urgent request's slack the refresh joins the step.
  a[0].deadline_s = 0.1;
  policy::form_batch(a, now, cfg, q, step_s, out, &cost, 1);
  BOOST_TEST(out.size() == 2u);
  // Without a cost model only the token budget applies.
  a[0].deadline_s = 0.005;
  policy::form_batch(a, now, cfg, q, step_s, out);
  BOOST_TEST(out.size() == 2u);
}

BOOST_AUTO_TEST_CASE(a_second_refresh_waits_for_the_next_step_unless_it_is_nearly_free) {
  auto q = test::two_step_quality();
  auto cost = test::flat_cost(0.001, 1e-5);  // 1 ms + 10 us per query row
  policy::scheduler_config cfg;
  // Deadlines far away, so the slack budget never binds: A and B are 1,024-row refreshes
  // (10.24 ms each), C a 32-row reuse step. After A the step lasts 11.24 ms; B would add 10.24 ms,
  // more than 10 % of it, so B waits for the next step while C still rides along (0.32 ms).
  std::vector<policy::request_view> a{test::request(1, 0, 1.0, 992, 32), test::request(2, 0, 2.0, 992, 32),
                                      in_reuse(test::request(3, 0, 3.0, 992, 32))};
  std::vector<int> out;
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({0, 2}), tt::per_element());
  // A growth of one whole step lets B in: 10.24 ms <= 11.24 ms.
  cfg.refresh_join_growth = 1.0;
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({0, 1, 2}), tt::per_element());
  // A short refresh is nearly free to add (64 rows, 0.64 ms <= 1.124 ms) and joins at 10 %.
  cfg.refresh_join_growth = 0.1;
  a[1].prompt_len = 32;
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({0, 1, 2}), tt::per_element());
  // The first refresh of a step is bound only by the slack budget, and FCFS (no budget)
  // batches refreshes up to the token budget as before.
  a[1].prompt_len = 992;
  cfg.order = policy::queue_order::fcfs;
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1);
  BOOST_TEST(out.size() == 3u);
}

BOOST_AUTO_TEST_CASE(a_saturated_group_defers_only_what_batching_does_not_pay_for) {
  auto q = test::two_step_quality();
  auto cost = test::flat_cost(0.005, 1e-5);
  policy::scheduler_config cfg;
  auto a = urgent_reuse_and_three_refreshes();
  std::vector<int> out;
  // Nothing waits: the deferred requests fit a later step at no cost, so the budget binds.
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({0}), tt::per_element());
  // Requests wait for admission: a slot left empty is capacity lost, and batching saves each
  // of them 5 ms against the 0.48 ms it adds, so the step fills.
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1, nullptr, 3);
  BOOST_TEST(out.size() == 4u);
  // More candidates than a step takes is saturation too.
  cfg.max_batch = 3;
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1);
  BOOST_TEST(out.size() == 3u);
  // A compute-bound refresh (4,096 rows: 41 ms added, 46 ms alone) still waits when it would
  // make the urgent request miss, saturated or not: a later step runs it for about the same.
  // The small refreshes behind it still fill the step.
  cfg.max_batch = 256;
  a[1] = test::request(2, 0, 10.0, 4064, 32);
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1, nullptr, 3);
  BOOST_TEST(out == std::vector<int>({0, 2, 3}), tt::per_element());
}

// A live group that can neither admit nor change taus leaves its queue out of the snapshot;
// its step decision still counts those requests as waiting, as the simulator's does.
BOOST_AUTO_TEST_CASE(a_step_decision_counts_the_queued_requests_it_does_not_list) {
  auto q = test::two_step_quality();
  auto cost = test::flat_cost(0.005, 1e-5);
  policy::group_policy p;  // least slack with the slack budget, no tau control
  policy::group_snapshot g;
  g.control_due = false;
  g.active = urgent_reuse_and_three_refreshes();
  auto d = policy::decide_step(g, p, &cost, q);
  BOOST_TEST(d.batch == std::vector<uint64_t>({1}), tt::per_element());
  BOOST_TEST(d.batch_index == std::vector<std::size_t>({0}), tt::per_element());
  g.active = urgent_reuse_and_three_refreshes();
  g.unlisted_queued = 3;
  d = policy::decide_step(g, p, &cost, q);
  BOOST_TEST(d.batch.size() == 4u);
  BOOST_TEST(d.batch_index == std::vector<std::size_t>({0, 1, 2, 3}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(a_busy_group_defers_only_what_gains_more_than_everyone_loses) {
  auto q = test::two_step_quality();
  auto cost = test::flat_cost(0.005, 1e-5);
  policy::scheduler_config cfg;
  auto a = urgent_reuse_and_three_refreshes();  // nothing waiting
  std::vector<int> out;
  // Predicted idle: a deferred refresh runs later on an idle group at no cost, so the budget binds.
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1, nullptr, 0, 0.0);
  BOOST_TEST(out == std::vector<int>({0}), tt::per_element());
  // Predicted busy half the time: deferring one refresh saves the one rider 0.48 ms and costs
  // the four requests present 0.5 x 5 ms each, so every refresh joins.
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1, nullptr, 0, 0.5);
  BOOST_TEST(out.size() == 4u);
  // Nearly idle (2 %): 0.48 ms > 0.02 x 4 x 5 = 0.4 ms, and the budget binds again.
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1, nullptr, 0, 0.02);
  BOOST_TEST(out == std::vector<int>({0}), tt::per_element());
  // A late refresh has only its latency left to win, and waiting costs it this step (5.32 ms)
  // besides: at the same 2 % it joins, while the on-time ones still wait.
  auto late = a;
  late[1].deadline_s = 0.001;  // cannot make it even alone
  policy::form_batch(late, 0.0, cfg, q, 0.0, out, &cost, 1, nullptr, 0, 0.02);
  BOOST_TEST(out == std::vector<int>({0, 1}), tt::per_element());
  // A 4,096-row refresh adds 40.96 ms and loses 5 ms by waiting: with four present at full
  // utilization (20 ms) it still waits, with ten (50 ms) it joins.
  a[1] = test::request(2, 0, 10.0, 4064, 32);
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1, nullptr, 0, 1.0);
  BOOST_TEST(out == std::vector<int>({0, 2, 3}), tt::per_element());
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1, nullptr, 6, 1.0);
  BOOST_TEST(out.size() == 4u);
}

BOOST_AUTO_TEST_CASE(a_missed_request_waits_only_until_its_lateness_outweighs_the_riders_gain) {
  auto q = test::two_step_quality();
  auto cost = test::flat_cost(0.005, 1e-5);  // 5 ms + 10 us per query row
  policy::scheduler_config cfg;
  // At 1 s: A, an urgent reuse step (5.32 ms alone, 0.18 ms of slack after it); B, a missed
  // 4,096-row refresh that adds 40.96 ms. With both present on a busy group, deferring B saves
  // the rider 40.96 ms and costs the two present 5 ms each plus what waiting costs B itself:
  // how far past its deadline it already is (at least the step it waits out).
  std::vector<policy::request_view> a{in_reuse(test::request(1, 0, 1.0055, 16, 32)),
                                      test::request(2, 0, 0.99, 4064, 32)};
  std::vector<int> out;
  // 10 ms late: 40.96 > 10 + 10, so it waits this step.
  policy::form_batch(a, 1.0, cfg, q, 0.0, out, &cost, 1, nullptr, 0, 1.0);
  BOOST_TEST(out == std::vector<int>({0}), tt::per_element());
  // 50 ms late: 40.96 < 10 + 50, so it joins whatever the rider's slack.
  a[1].deadline_s = 0.95;
  policy::form_batch(a, 1.0, cfg, q, 0.0, out, &cost, 1, nullptr, 0, 1.0);
  BOOST_TEST(out == std::vector<int>({0, 1}), tt::per_element());
  // On time, the same refresh waits: only a late request's own wait counts.
  a[1].deadline_s = 10.0;
  policy::form_batch(a, 1.0, cfg, q, 0.0, out, &cost, 1, nullptr, 0, 1.0);
  BOOST_TEST(out == std::vector<int>({0}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(a_refresh_that_does_not_fit_joins_with_the_layers_that_do) {
  auto q = test::two_step_quality();
  auto cost = test::flat_cost(0.001, 1e-5);  // 1 ms + 10 us per query row
  policy::scheduler_config cfg;
  // Urgent A: one reuse step left (1.32 ms alone), deadline 5 ms: a budget of 3.68 ms. B's
  // whole 4,096-row refresh adds 40.96 ms, so it waits without splitting.
  std::vector<policy::request_view> a{in_reuse(test::request(1, 0, 0.005, 4064, 32)),
                                      test::request(2, 0, 10.0, 4064, 32)};
  std::vector<int> out;
  std::vector<double> shares;
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1, &shares);
  BOOST_TEST(out == std::vector<int>({0}), tt::per_element());
  BOOST_TEST(shares == std::vector<double>({1.0}), tt::per_element());
  // Split in 32 layer ranges, each adds 1.28 ms. With a growth cap of 3 steps (3.96 ms) the
  // budget binds: two ranges (2.56 ms) fit its 3.68 ms, three (3.84 ms) do not.
  cfg.refresh_split = 32;
  cfg.refresh_split_growth = 3.0;
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1, &shares);
  BOOST_TEST(out == std::vector<int>({0, 1}), tt::per_element());
  BOOST_TEST(shares == std::vector<double>({1.0, 2.0 / 32}), tt::per_element());
  // With a cap of one step (1.32 ms) the growth binds: one range.
  cfg.refresh_split_growth = 1.0;
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1, &shares);
  BOOST_TEST(shares == std::vector<double>({1.0, 1.0 / 32}), tt::per_element());
  // The default 2 % of a step (26 us) fits no range: B waits as before.
  cfg.refresh_split_growth = 0.02;
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1, &shares);
  BOOST_TEST(out == std::vector<int>({0}), tt::per_element());
  // Part-way through (30 of 32 ranges done) B has 2.56 ms left, which fits A's budget
  // whole: it joins with its remaining share and completes (a whole step).
  cfg.refresh_split_growth = 3.0;
  a[1].refresh_done = 30.0 / 32;
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1, &shares);
  BOOST_TEST(shares == std::vector<double>({1.0, 2.0 / 32}), tt::per_element());
  // A request first in deadline order runs whole even when it alone exceeds others' slack.
  a[0].deadline_s = 20.0;
  policy::form_batch(a, 0.0, cfg, q, 0.0, out, &cost, 1, &shares);
  BOOST_TEST(out == std::vector<int>({1, 0}), tt::per_element());
  BOOST_TEST(shares == std::vector<double>({2.0 / 32, 1.0}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(chain_slack_serves_the_earliest_deadline_first) {
  auto q = test::two_step_quality();          // every block: one refresh and one reuse
  auto cost = test::flat_cost(0.001, 1e-5);   // 1 ms + 10 us per query row
  policy::scheduler_config cfg;
  cfg.token_budget = 5500;
  // In a burst the group's expected step time is long (50 ms). C: three blocks of a
  // 968 + 96 canvas, alone 3 x (11.64 + 1.32) = 38.9 ms, deadline 200 ms. D: one block of a
  // 4968 + 32 canvas, alone 51 + 1.32 = 52.3 ms, deadline 60 ms. Their refreshes (1,064 and
  // 5,000 rows) do not fit one 5,500-row step.
  std::vector<policy::request_view> a{test::request(1, 0, 0.2, 968, 96), test::request(2, 0, 0.06, 4968, 32)};
  std::vector<int> out;
  // EDF: D first. D finishes at 52.3 ms (< 60), C after it at 91.2 ms (< 200): both on time.
  policy::form_batch(a, 0.0, cfg, q, 0.05, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({1}), tt::per_element());
  // Slack at the expected step time (0.2 - 6 x 0.05 = -0.1 for C against 0.06 - 2 x 0.05 =
  // -0.04 for D) serves C first, and D then ends at 11.6 + 52.3 = 63.9 ms: a miss.
  cfg.chain_slack = false;
  policy::form_batch(a, 0.0, cfg, q, 0.05, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({0}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(chain_slack_lets_a_refresh_in_when_everyone_can_absorb_it) {
  auto q = test::two_step_quality();
  auto cost = test::flat_cost(0.001, 1e-5);
  policy::scheduler_config cfg;
  // A has one reuse step left (1.32 ms alone) and 60 ms to go: it can absorb 58.7 ms. B's
  // 2,000-row refresh adds 20 ms to the step, so A still ends at 22.3 ms and B starts now.
  std::vector<policy::request_view> a{in_reuse(test::request(1, 0, 0.06, 1968, 32)),
                                      test::request(2, 0, 0.10, 1968, 32)};
  std::vector<int> out;
  policy::form_batch(a, 0.0, cfg, q, 0.05, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({0, 1}), tt::per_element());
  // At the expected step time B's slack (0.10 - 2 x 0.05 = 0) is below A's (10 ms), so B
  // goes first with a zero budget and A's reuse (0.32 ms more) has to wait a step.
  cfg.chain_slack = false;
  policy::form_batch(a, 0.0, cfg, q, 0.05, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({1}), tt::per_element());
  // With 15 ms left A cannot absorb B's 20 ms under either rule.
  cfg.chain_slack = true;
  a[0].deadline_s = 0.015;
  policy::form_batch(a, 0.0, cfg, q, 0.05, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({0}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(admission_respects_slots_and_kv_memory) {
  auto q = test::two_step_quality();
  policy::scheduler_config cfg;
  std::vector<policy::request_view> queued{test::request(1, 0.0, 9, 3000, 32), test::request(2, 0.1, 1, 500, 32),
                                           test::request(3, 0.2, 2, 500, 32)};
  policy::admission_room room{2, 1200};
  // Least slack: 2 (deadline 1) then 3; 1 does not fit the KV left.
  auto in = policy::admit(queued, room, 0.0, cfg, q, 0.01);
  BOOST_TEST(in == std::vector<int>({1, 2}), tt::per_element());
  // FCFS does not overtake the head of the queue.
  cfg.order = policy::queue_order::fcfs;
  in = policy::admit(queued, room, 0.0, cfg, q, 0.01);
  BOOST_TEST(in.empty());
  room.kv_tokens = 1e9;
  room.slots = 1;
  in = policy::admit(queued, room, 0.0, cfg, q, 0.01);
  BOOST_TEST(in == std::vector<int>({0}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(admission_control_defers_what_would_break_an_edf_schedule) {
  auto q = test::two_step_quality();
  auto cost = test::flat_cost(0.001, 1e-5);
  policy::scheduler_config cfg;
  // Each one-block 4,096-canvas request needs a refresh (41 ms of rows) and a reuse (0.3 ms):
  // 41.3 ms of group time, and 43.3 ms alone, so each meets a 60 ms deadline by itself but
  // two together need 82.6 ms.
  std::vector<policy::request_view> queued{test::request(1, 0, 0.06, 4064, 32), test::request(2, 0, 0.061, 4064, 32),
                                           test::request(3, 0, 0.01, 4064, 32)};  // 3 misses even alone
  std::vector<policy::request_view> active;
  policy::admission_room room{8, 1e9};
  auto in = policy::admit(queued, room, 0.0, cfg, q, 0.01, &cost, 1, &active);
  BOOST_TEST(in == std::vector<int>({0}), tt::per_element());
  // Once request 1 runs, the same test keeps 2 out; a looser deadline lets it in.
  active.push_back(queued[0]);
  queued[1].deadline_s = 0.2;
  in = policy::admit({queued[1], queued[2]}, room, 0.0, cfg, q, 0.01, &cost, 1, &active);
  BOOST_TEST(in == std::vector<int>({0, 1}), tt::per_element());  // nobody deferred: late one too
  cfg.admission_control = false;
  queued[1].deadline_s = 0.061;
  active.clear();
  in = policy::admit(queued, room, 0.0, cfg, q, 0.01, &cost, 1, &active);
  BOOST_TEST(in.size() == 3u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(threshold_controller)

BOOST_AUTO_TEST_CASE(tau_drops_exactly_when_slack_runs_out) {
  auto q = test::fastdllm_quality();
  policy::threshold_config cfg;  // 0.9 down to 0.7 in 0.05 steps
  BOOST_TEST(policy::tau_levels(cfg) == std::vector<double>({0.9, 0.85, 0.8, 0.75, 0.7}), tt::per_element());
  const double step = 0.01;
  auto r = test::request(1, 0, 0, 100, 32);
  const double need_09 = q.steps_for(32, 0.9) * step;    // 9.846 steps
  const double need_085 = q.steps_for(32, 0.85) * step;  // 8.545 steps
  r.deadline_s = need_09;
  BOOST_TEST(policy::tau_from_slack(r, 0.0, q, step, cfg) == 0.9);
  r.deadline_s = need_09 - 1e-9;
  BOOST_TEST(policy::tau_from_slack(r, 0.0, q, step, cfg) == 0.85);
  r.deadline_s = need_085;
  BOOST_TEST(policy::tau_from_slack(r, 0.0, q, step, cfg) == 0.85);
  r.deadline_s = 0.0;  // nothing meets it: fewest steps
  BOOST_TEST(policy::tau_from_slack(r, 0.0, q, step, cfg) == 0.7);
  cfg.per_request = false;
  BOOST_TEST(policy::tau_from_slack(r, 0.0, q, step, cfg) == 0.9);
}

BOOST_AUTO_TEST_CASE(load_cap_engages_under_overload_only) {
  auto q = test::fastdllm_quality();
  policy::threshold_config cfg;
  // Each one-block request costs 10 ms of group time per step: 98.5 ms at tau 0.9, 85.4 ms
  // at 0.85. Ten with deadlines at 0.9 s: 0.985 s of work does not fit at 0.9 but 0.854 does.
  std::vector<policy::request_view> reqs;
  for (int i = 0; i < 10; ++i) reqs.push_back(test::request(i, 0, 0.9, 100, 32));
  std::vector<policy::marginal_cost> marg(reqs.size(), {0.01, 0.01});
  std::vector<double> tau;
  auto cap = policy::control_group(reqs, marg, 0.0, q, 0.001, cfg, tau);
  BOOST_TEST(cap.cap == 0.85);
  BOOST_TEST(cap.infeasible_prefixes == 0);
  for (double t : tau) BOOST_TEST(t == 0.85);
  // Two requests fit easily: no cap, every tau stays at 0.9.
  reqs.resize(2);
  marg.resize(2);
  cap = policy::control_group(reqs, marg, 0.0, q, 0.001, cfg, tau);
  BOOST_TEST(cap.cap == 0.9);
  for (double t : tau) BOOST_TEST(t == 0.9);
  cfg.load_cap = false;
  reqs.assign(10, test::request(0, 0, 0.9, 100, 32));
  marg.assign(10, {0.01, 0.01});
  cap = policy::control_group(reqs, marg, 0.0, q, 0.001, cfg, tau);
  BOOST_TEST(cap.cap == 0.9);
}

BOOST_AUTO_TEST_CASE(hopeless_requests_do_not_drag_the_cap_down) {
  auto q = test::fastdllm_quality();
  policy::threshold_config cfg;
  std::vector<policy::request_view> reqs{test::request(1, 0, 0.5, 100, 32), test::request(2, 0, 0.005, 100, 32)};
  std::vector<policy::marginal_cost> marg(2, {0.01, 0.01});
  std::vector<double> tau;
  auto cap = policy::control_group(reqs, marg, 0.0, q, 0.001, cfg, tau);
  BOOST_TEST(cap.excluded == 1);
  BOOST_TEST(cap.cap == 0.9);
  BOOST_TEST(tau[0] == 0.9);
  BOOST_TEST(tau[1] == 0.7);  // its own slack says: fewest steps
  // When no cap level rescues anyone, the cap stays at the top.
  std::vector<policy::request_view> two{test::request(1, 0, 0.10, 100, 32), test::request(2, 0, 0.11, 100, 32)};
  cap = policy::control_group(two, marg, 0.0, q, 0.001, cfg, tau);
  // Prefix 2 needs >= 0.125 s at tau 0.7 > 0.11: infeasible at every level, so no cap.
  BOOST_TEST(cap.infeasible_prefixes == 1);
  BOOST_TEST(cap.cap == 0.9);
}

// Accuracy budget (Fast-dLLM curve): loss against tau 0.9 is 0.75 points at 0.85, 1.5 at 0.8,
// 2.2 at 0.75 and 2.9 at 0.7.
BOOST_AUTO_TEST_CASE(accuracy_loss_and_uncommitted_tokens) {
  auto q = test::fastdllm_quality();
  BOOST_TEST(policy::accuracy_loss(q, 0.9, 0.9) == 0.0);
  BOOST_TEST(policy::accuracy_loss(q, 0.85, 0.9) == 0.0075, tt::tolerance(1e-9));
  BOOST_TEST(policy::accuracy_loss(q, 0.8, 0.9) == 0.015, tt::tolerance(1e-9));
  BOOST_TEST(policy::accuracy_loss(q, 0.7, 0.9) == 0.029, tt::tolerance(1e-9));
  BOOST_TEST(policy::accuracy_loss(q, 1.0, 0.9) == 0.0);  // never negative
  auto r = test::request(1, 0, 1, 100, 96);
  BOOST_TEST(policy::uncommitted_tokens(r) == 96);
  r.blocks_done = 1;  // block 2 not started
  BOOST_TEST(policy::uncommitted_tokens(r) == 64);
  r.steps_in_block = 2;  // block 2 started, 12 masks left
  r.masks_left_in_block = 12;
  BOOST_TEST(policy::uncommitted_tokens(r) == 44);
}

BOOST_AUTO_TEST_CASE(ledger_reserves_charges_and_releases) {
  auto q = test::fastdllm_quality();
  policy::accuracy_ledger led;
  led.budget = 0.01;
  auto r = test::request(1, 0, 1, 100, 64, 0.8);
  led.enter(r, q);  // planned: the whole loss at 0.8
  BOOST_TEST(led.reserved == 0.015, tt::tolerance(1e-12));
  // Its first tokens at 0.8 charge the whole loss at 0.8, not their share of the answer.
  r.tau_low = led.commit(r, 32, 0.8, q);
  BOOST_TEST(r.tau_low == 0.8);
  BOOST_TEST(led.spent == 0.015, tt::tolerance(1e-12));
  BOOST_TEST(led.reserved == 0.0, tt::tolerance(1e-12));
  r.blocks_done = 1;
  BOOST_TEST(led.planned(r, 0.8, q) == 0.0, tt::tolerance(1e-12));  // charged already
  BOOST_TEST(led.planned(r, 0.9, q) == 0.0, tt::tolerance(1e-12));  // a raise refunds nothing
  BOOST_TEST(led.planned(r, 0.7, q) == 0.014, tt::tolerance(1e-12));  // only the rise to loss(0.7)
  // Committing higher afterwards changes nothing; lower charges the difference.
  BOOST_TEST(led.commit(r, 4, 0.9, q) == 0.8);
  BOOST_TEST(led.spent == 0.015, tt::tolerance(1e-12));
  led.reserved += led.planned(r, 0.7, q);
  r.tau_low = led.commit(r, 4, 0.7, q);
  BOOST_TEST(r.tau_low == 0.7);
  BOOST_TEST(led.spent == 0.029, tt::tolerance(1e-12));
  BOOST_TEST(led.reserved == 0.0, tt::tolerance(1e-12));
  r.tau = 0.7;
  led.leave(r, q);  // dropped: it reserved nothing more
  BOOST_TEST(led.reserved == 0.0, tt::tolerance(1e-12));
  led.finish();
  BOOST_TEST(led.earned == 0.01, tt::tolerance(1e-12));
  BOOST_TEST(led.credit() == -0.019, tt::tolerance(1e-12));
  // A request with nothing left to commit plans no loss.
  r.blocks_done = 2;
  r.tau_low = 1.0;
  BOOST_TEST(led.planned(r, 0.7, q) == 0.0);
  policy::accuracy_ledger off;  // no budget: nothing is tracked, but tau_low still is
  off.enter(r, q);
  r.blocks_done = 0;
  BOOST_TEST(off.commit(r, 8, 0.75, q) == 0.75);
  off.finish();
  BOOST_TEST(!off.enabled());
  BOOST_TEST(off.earned == 0.0);
  BOOST_TEST(off.spent == 0.0);
}

BOOST_AUTO_TEST_CASE(a_policy_switch_starts_the_ledger_without_banked_credit) {
  auto q = test::fastdllm_quality();
  policy::accuracy_ledger led;
  led.budget = 0.01;
  for (int i = 0; i < 100; ++i) led.finish();  // a hundred requests at the reference tau
  BOOST_TEST(led.credit() == 1.0, tt::tolerance(1e-12));
  auto r = test::request(1, 0, 1, 100, 64, 0.8);
  led.enter(r, q);  // one request in flight holds its reservation across the switch
  led.restart();
  BOOST_TEST(led.credit() == 0.0, tt::tolerance(1e-12));
  BOOST_TEST(led.reserved == 0.015, tt::tolerance(1e-12));
  led.commit(r, 64, 0.8, q);  // it spends what it reserved
  led.finish();               // and earns its own budget
  BOOST_TEST(led.credit() == 0.01, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(budget_lowers_tau_only_while_credit_remains) {
  auto q = test::fastdllm_quality();
  policy::threshold_config cfg;  // 0.9 down to 0.7
  cfg.accuracy_budget = 0.01;
  policy::accuracy_ledger led;
  led.budget = 0.01;
  // Its slack asks for tau 0.7 (deadline already passed: fewest steps).
  std::vector<policy::request_view> reqs{test::request(1, 0, 0.0, 100, 32)};
  std::vector<policy::marginal_cost> marg(1, {0.001, 0.001});
  std::vector<double> tau;
  policy::control_group(reqs, marg, 0.0, q, 0.01, cfg, tau, &led);
  BOOST_TEST(tau[0] == 0.9);  // nothing finished yet: no credit, no loss
  BOOST_TEST(led.reserved == 0.0);
  led.finish();  // credit 0.01: 0.85 costs 0.0075, 0.8 costs 0.015
  policy::control_group(reqs, marg, 0.0, q, 0.01, cfg, tau, &led);
  BOOST_TEST(tau[0] == 0.85);
  BOOST_TEST(led.reserved == 0.0075, tt::tolerance(1e-12));
  BOOST_TEST(led.credit() == 0.0025, tt::tolerance(1e-12));
  reqs[0].tau = 0.85;
  led.finish();  // credit 0.0125: 0.8 costs 0.0075 more, 0.75 0.0145 more
  policy::control_group(reqs, marg, 0.0, q, 0.01, cfg, tau, &led);
  BOOST_TEST(tau[0] == 0.8);
  BOOST_TEST(led.credit() == 0.005, tt::tolerance(1e-12));
  BOOST_TEST(led.credit() >= 0.0);
  // Slack back (deadline far away): tau returns to 0.9 and the whole reservation is refunded.
  reqs[0].tau = 0.8;
  reqs[0].deadline_s = 10.0;
  policy::control_group(reqs, marg, 0.0, q, 0.01, cfg, tau, &led);
  BOOST_TEST(tau[0] == 0.9);
  BOOST_TEST(led.reserved == 0.0, tt::tolerance(1e-12));
  BOOST_TEST(led.credit() == 0.02, tt::tolerance(1e-12));
  // Without a ledger (or with a disabled one) the same request goes straight to 0.7.
  reqs[0].tau = 0.9;
  reqs[0].deadline_s = 0.0;
  policy::control_group(reqs, marg, 0.0, q, 0.01, cfg, tau);
  BOOST_TEST(tau[0] == 0.7);
}

BOOST_AUTO_TEST_CASE(a_request_is_not_raised_above_the_lowest_tau_it_committed_at) {
  auto q = test::fastdllm_quality();
  policy::threshold_config cfg;
  cfg.accuracy_budget = 0.01;
  // A far deadline asks for the reference tau; one request has already committed at 0.8.
  std::vector<policy::request_view> reqs{test::request(1, 0, 10.0, 100, 64, 0.8), test::request(2, 0, 10.0, 100, 64, 0.8)};
  reqs[0].tau_low = 0.8;
  reqs[0].blocks_done = 1;
  std::vector<policy::marginal_cost> marg(reqs.size(), {0.001, 0.001});
  std::vector<double> tau;
  policy::accuracy_ledger led;
  led.budget = 0.01;
  for (const auto& r : reqs) led.enter(r, q);
  policy::control_group(reqs, marg, 0.0, q, 0.01, cfg, tau, &led);
  BOOST_TEST(tau[0] == 0.8);  // charged at 0.8 already: kept there
  BOOST_TEST(tau[1] == 0.9);  // planned at 0.8 but committed nothing yet: raised, refunded
  BOOST_TEST(led.reserved == 0.0, tt::tolerance(1e-12));
  // A client floor above it still wins, and a pinned tau is kept.
  reqs[0].tau_floor = 0.85;
  policy::control_group(reqs, marg, 0.0, q, 0.01, cfg, tau, &led);
  BOOST_TEST(tau[0] == 0.85);
  reqs[0].tau_floor = 0;
  reqs[0].tau_pinned = true;
  reqs[0].tau = 0.9;
  policy::control_group(reqs, marg, 0.0, q, 0.01, cfg, tau, &led);
  BOOST_TEST(tau[0] == 0.9);
}

BOOST_AUTO_TEST_CASE(budget_is_spent_breadth_first_in_deadline_order) {
  auto q = test::fastdllm_quality();
  policy::threshold_config cfg;
  cfg.accuracy_budget = 0.0075;
  // Step 10 ms: 6.25 steps at 0.7 fit a 65-67 ms deadline, 6.84 at 0.75 do not, so each of
  // these three asks for 0.7 and is not hopeless; request 4 is (its deadline has passed).
  std::vector<policy::request_view> reqs{test::request(3, 0, 0.067, 100, 32), test::request(1, 0, 0.065, 100, 32),
                                         test::request(4, 0, 0.0, 100, 32), test::request(2, 0, 0.066, 100, 32)};
  std::vector<policy::marginal_cost> marg(reqs.size(), {0.0001, 0.0001});
  std::vector<double> tau;
  policy::accuracy_ledger led;
  led.budget = cfg.accuracy_budget;
  for (int i = 0; i < 3; ++i) led.finish();  // credit 0.0225: three steps to 0.85, or one to 0.75
  policy::control_group(reqs, marg, 0.0, q, 0.01, cfg, tau, &led);
  BOOST_TEST(tau == std::vector<double>({0.85, 0.85, 0.9, 0.85}), tt::per_element());
  BOOST_TEST(led.credit() >= -1e-12);
  // Credit for two: the two earliest deadlines get them; the hopeless request comes last.
  policy::accuracy_ledger two;
  two.budget = cfg.accuracy_budget;
  two.finish();
  two.finish();
  policy::control_group(reqs, marg, 0.0, q, 0.01, cfg, tau, &two);
  BOOST_TEST(tau == std::vector<double>({0.9, 0.85, 0.9, 0.85}), tt::per_element());
  BOOST_TEST(two.credit() == 0.0, tt::tolerance(1e-12));
  // Plenty of credit: everyone reaches the level it asked for.
  policy::accuracy_ledger rich;
  rich.budget = 1.0;
  rich.finish();
  policy::control_group(reqs, marg, 0.0, q, 0.01, cfg, tau, &rich);
  BOOST_TEST(tau == std::vector<double>({0.7, 0.7, 0.7, 0.7}), tt::per_element());
}

BOOST_AUTO_TEST_SUITE_END()

// The cap counts predicted arrivals (threshold.hpp): each one-block request below costs 10 ms
// of group time per step, so its work is steps_for(32, c) x 10 ms: 98.5 ms at tau 0.9, 85.4 ms
// at 0.85, 62.5 ms at 0.7 (Fast-dLLM curve: 3.25, 3.75 and 5.12 tokens per step).
BOOST_AUTO_TEST_SUITE(cap_from_predicted_load)

namespace {
// One sample of predicted arrivals with SLO window `window_s`, at `rate` requests/s.
policy::arrival_demand one_sample(const policy::quality_model& q, const policy::threshold_config& cfg, double rate,
                                  double window_s) {
  policy::arrival_demand d;
  d.rate = rate;
  d.levels = policy::tau_levels(cfg);
  d.window_s = {window_s};
  for (double c : d.levels) d.work_s.push_back({q.steps_for(32, c) * 0.01});
  return d;
}
}  // namespace

BOOST_AUTO_TEST_CASE(predicted_utilization_is_the_rate_times_the_mean_work_at_the_nearest_level) {
  policy::arrival_demand d;
  BOOST_TEST(policy::predicted_utilization(d, 0.9) == 0.0);
  d.rate = 10;
  d.levels = {0.9, 0.8};
  d.window_s = {0.5, 1.0};
  d.work_s = {{0.01, 0.03}, {0.005, 0.015}};
  BOOST_TEST(policy::predicted_utilization(d, 0.9) == 0.2, tt::tolerance(1e-12));
  BOOST_TEST(policy::predicted_utilization(d, 0.82) == 0.1, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(arrivals_due_earlier_count_in_a_prefix) {
  auto q = test::fastdllm_quality();
  policy::threshold_config cfg;
  // Eight requests due at 0.9 s: 0.788 s of work at 0.9 fits alone. Arrivals at 2/s with a
  // 0.1-s window fall due before them from now until 0.8 s: 2 x 0.8 x 98.5 ms = 0.158 s more,
  // 0.946 s > 0.9 at tau 0.9; at 0.85, 0.683 + 2 x 0.8 x 0.0854 = 0.820 s fits.
  std::vector<policy::request_view> reqs;
  for (int i = 0; i < 8; ++i) reqs.push_back(test::request(i, 0, 0.9, 100, 32));
  std::vector<policy::marginal_cost> marg(reqs.size(), {0.01, 0.01});
  std::vector<double> tau;
  BOOST_TEST(policy::control_group(reqs, marg, 0.0, q, 0.001, cfg, tau).cap == 0.9);
  const auto d = one_sample(q, cfg, 2.0, 0.1);
  const auto cap = policy::control_group(reqs, marg, 0.0, q, 0.001, cfg, tau, nullptr, &d);
  BOOST_TEST(cap.cap == 0.85);
  for (double t : tau) BOOST_TEST(t == 0.85);
  // The same arrivals with windows longer than every deadline present are never due first,
  // and 2/s x 98.5 ms is far below the capacity: no cap.
  const auto later = one_sample(q, cfg, 2.0, 1.5);
  BOOST_TEST(policy::control_group(reqs, marg, 0.0, q, 0.001, cfg, tau, nullptr, &later).cap == 0.9);
}

BOOST_AUTO_TEST_CASE(arrivals_above_the_capacity_at_a_level_rule_it_out) {
  auto q = test::fastdllm_quality();
  policy::threshold_config cfg;
  // One request with plenty of time, and arrivals never due before it: only the long-run
  // test binds. At 11/s they need 11 x 98.5 ms = 1.08 s of group time per second at 0.9, and
  // 11 x 85.4 ms = 0.94 s at 0.85: the cap is the highest level the group keeps up at.
  std::vector<policy::request_view> reqs{test::request(1, 0, 5.0, 100, 32)};
  std::vector<policy::marginal_cost> marg(1, {0.01, 0.01});
  std::vector<double> tau;
  auto d = one_sample(q, cfg, 11.0, 10.0);
  BOOST_TEST(policy::control_group(reqs, marg, 0.0, q, 0.001, cfg, tau, nullptr, &d).cap == 0.85);
  // At 15/s only tau 0.7 keeps up (15 x 62.5 ms = 0.94 s; 15 x 68.4 ms = 1.03 s at 0.75).
  d = one_sample(q, cfg, 15.0, 10.0);
  BOOST_TEST(policy::control_group(reqs, marg, 0.0, q, 0.001, cfg, tau, nullptr, &d).cap == 0.7);
  // At 17/s no level does (1.06 s at 0.7): lowering tau rescues nobody, so the cap stays at
  // the top.
  d = one_sample(q, cfg, 17.0, 10.0);
  BOOST_TEST(policy::control_group(reqs, marg, 0.0, q, 0.001, cfg, tau, nullptr, &d).cap == 0.9);
  // Without tau control's cap the prediction is not looked at.
  cfg.load_cap = false;
  d = one_sample(q, cfg, 11.0, 10.0);
  BOOST_TEST(policy::control_group(reqs, marg, 0.0, q, 0.001, cfg, tau, nullptr, &d).cap == 0.9);
}

BOOST_AUTO_TEST_CASE(demand_comes_from_the_window_of_recent_arrivals) {
  auto q = test::fastdllm_quality();
  policy::threshold_config cfg;
  // 10 us per query row and nothing else: a refresh of a 132-token canvas adds 1.32 ms to a
  // saturated step and a reuse step 0.32 ms, so a one-block request needs
  // 1.32 + (steps - 1) x 0.32 ms.
  const auto cost = test::flat_cost(0.0, 1e-5);
  const policy::batch_totals ref = policy::saturated_batch(132, 32, 8192, q.steps_for(32, 0.9));
  policy::forecast_config fc;
  fc.window_s = 2.0;
  // Four arrivals in the last 2 s (one without a known SLO window: counted in the rate, not
  // in the mix), one older than the window.
  std::vector<policy::arrival_record> a{{0.5, 100, 32, 0.3}, {1.5, 100, 32, 0.4}, {2.0, 100, 32, 0.2},
                                        {2.5, 100, 32, 0.0}, {2.9, 100, 32, 0.1}};
  const auto d = policy::demand_from_arrivals(a, 3.0, fc, cost, 1, ref, 32, q, cfg);
  BOOST_TEST(d.rate == 2.0, tt::tolerance(1e-12));
  BOOST_TEST(d.window_s == std::vector<double>({0.1, 0.2, 0.4}), tt::per_element());
  BOOST_REQUIRE(d.work_s.size() == d.levels.size());
  for (std::size_t l = 0; l < d.levels.size(); ++l)
    for (double w : d.work_s[l])
      BOOST_TEST(w == 1.32e-3 + (q.steps_for(32, d.levels[l]) - 1) * 0.32e-3, tt::tolerance(1e-9));

  // The running state: the demand follows new arrivals at most every refresh_s, and empties
  // as soon as the window holds nothing.
  policy::load_forecast lf;
  lf.cfg = fc;
  lf.refresh_s = 0.5;
  lf.record({0.0, 100, 32, 0.3});
  BOOST_TEST(lf.update(0.0, cost, 1, ref, 32, q, cfg).rate == 0.5, tt::tolerance(1e-12));
  lf.record({0.2, 100, 32, 0.3});
  BOOST_TEST(lf.update(0.2, cost, 1, ref, 32, q, cfg).rate == 0.5, tt::tolerance(1e-12));  // not due yet
  BOOST_TEST(lf.update(0.5, cost, 1, ref, 32, q, cfg).rate == 1.0, tt::tolerance(1e-12));
  BOOST_TEST(lf.update(2.5, cost, 1, ref, 32, q, cfg).empty());  // both older than 2 s
  BOOST_TEST(lf.arrivals.empty());
}

BOOST_AUTO_TEST_SUITE_END()
