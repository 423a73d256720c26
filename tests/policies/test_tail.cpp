#define BOOST_TEST_MODULE policies_tail
#include <boost/test/unit_test.hpp>

#include "fixtures.hpp"
#include "policies/presets.hpp"
#include "policies/scheduler.hpp"
#include "sim/report.hpp"
#include "sim/simulator.hpp"

#include <filesystem>
#include <fstream>

using namespace dls;
namespace tt = boost::test_tools;

BOOST_AUTO_TEST_CASE(a_missed_deadline_is_renewed_by_whole_slo_windows) {
  policy::scheduler_config cfg;
  cfg.missed_renewal = 1;  // off by default (docs/policies.md)
  auto r = test::request(1, 0.0, 1.0, 968, 32);  // window = 1 s
  // On time: its own deadline.
  BOOST_TEST(policy::effective_deadline_s(r, 0.5, 0.2, cfg) == 1.0);
  // Fastest finish 1.7 s: late by 0.7 s, one window more.
  BOOST_TEST(policy::effective_deadline_s(r, 1.5, 0.2, cfg) == 2.0, tt::tolerance(1e-12));
  // Late by 2.3 s: three windows.
  BOOST_TEST(policy::effective_deadline_s(r, 3.1, 0.2, cfg) == 4.0, tt::tolerance(1e-12));
  // Half windows: late by 0.7 s -> two halves.
  cfg.missed_renewal = 0.5;
  BOOST_TEST(policy::effective_deadline_s(r, 1.5, 0.2, cfg) == 2.0, tt::tolerance(1e-12));
  cfg.missed_renewal = 0;
  BOOST_TEST(policy::effective_deadline_s(r, 1.5, 0.2, cfg) == 1.0);
}

BOOST_AUTO_TEST_CASE(a_renewed_request_competes_in_deadline_order) {
  auto q = test::two_step_quality();
  auto cost = test::flat_cost(0.001, 1e-5);  // a 1,000-row refresh 11 ms, a reuse 1.32 ms
  policy::scheduler_config cfg;
  cfg.token_budget = 1500;                   // one refresh per step
  cfg.missed_renewal = 1;
  cfg.oldest_missed_first = false;
  // At 5 s: A arrived at 0 with a 1-s window and missed; its fastest finish (12.3 ms) is
  // 4.01 s late, so it is renewed to 1 + 5 x 1 = 6 s. B (deadline 7 s) is on time.
  std::vector<policy::request_view> a{test::request(1, 0.0, 1.0, 968, 32), test::request(2, 4.9, 7.0, 968, 32)};
  std::vector<int> out;
  policy::form_batch(a, 5.0, cfg, q, 0.05, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({0}), tt::per_element());
  // Without renewal a late request goes after every on-time one: it waits while any arrive.
  cfg.missed_renewal = 0;
  policy::form_batch(a, 5.0, cfg, q, 0.05, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({1}), tt::per_element());
  // An on-time request due before the renewed deadline still goes first.
  cfg.missed_renewal = 1;
  a[1].deadline_s = 5.5;
  policy::form_batch(a, 5.0, cfg, q, 0.05, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({1}), tt::per_element());
  // Admission follows the same order: with one slot A is admitted before B at 7 s.
  a[1].deadline_s = 7.0;
  policy::admission_room room{1, 1e9};
  const std::vector<policy::request_view> none;
  auto picked = policy::admit(a, room, 5.0, cfg, q, 0.05, &cost, 1, &none);
  BOOST_TEST(picked == std::vector<int>({0}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(strict_requests_that_cannot_be_on_time_are_refused_with_a_reason) {
  auto q = test::two_step_quality();
  auto cost = test::flat_cost(0.001, 1e-5);
  policy::scheduler_config cfg;
  const auto r = test::request(10, 0.0, 0.05, 968, 32);  // alone 12.3 ms, 50 ms left
  const std::vector<policy::request_view> none;
  BOOST_TEST(policy::refuse_if_late(r, none, none, 0.0, cfg, q, cost, 1, 0.7).empty());
  // Due in 10 ms: its own steps take longer.
  auto tight = r;
  tight.deadline_s = 0.01;
  const auto why = policy::refuse_if_late(tight, none, none, 0.0, cfg, q, cost, 1, 0.7);
  BOOST_TEST(why.find("cannot meet its deadline") != std::string::npos, why);
  BOOST_TEST(why.find("alone") != std::string::npos, why);
  // Six queued requests due earlier owe about 6 x 10.3 ms of saturated work before it.
  std::vector<policy::request_view> queued;
  for (int i = 0; i < 6; ++i) queued.push_back(test::request(static_cast<std::uint64_t>(i), 0.0, 0.03, 968, 32));
  const auto owed = policy::refuse_if_late(r, none, queued, 0.0, cfg, q, cost, 1, 0.7);
  BOOST_TEST(owed.find("owes") != std::string::npos, owed);
  // Due later, they come after it in deadline order: it fits. FCFS serves them first: refused.
  for (auto& o : queued) o.deadline_s = 0.2;
  BOOST_TEST(policy::refuse_if_late(r, none, queued, 0.0, cfg, q, cost, 1, 0.7).empty());
  cfg.order = policy::queue_order::fcfs;
  BOOST_TEST(!policy::refuse_if_late(r, none, queued, 0.0, cfg, q, cost, 1, 0.7).empty());
}

BOOST_AUTO_TEST_CASE(the_simulator_refuses_strict_requests_and_counts_them_as_misses) {
  // One GPU; a step costs 10 ms + 12 ms per request; one block is two steps at every tau.
  // Judged at the group's first decision, as a live group judges them (decide_step).
  // A one-block request alone: 2 x 22 = 44 ms, so its deadline is 88 ms (S = 2), and it adds
  // 2 x 12 = 24 ms of saturated work. Ten arrive at 0. The k-th (from 0) finds k accepted ahead
  // of it: accepted while (k + 1) x 24 <= 88 ms, i.e. three; seven are refused.
  const auto dir = std::filesystem::temp_directory_path() / "dls_tail_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "cost.yaml") << "kind: linear\nlinear: {1: {fixed_s: 0.01, per_request_s: 0.012}}\n";
  std::ofstream(dir / "q.yaml") << "points:\n  - {tau: 0.7, accuracy: 0.7, tokens_per_step: 16}\n"
                                   "  - {tau: 0.9, accuracy: 0.9, tokens_per_step: 16}\n";
  const auto c = sim::parse_cluster("name: t\nnodes: [{name: n, devices: {kind: cuda, count: 1}, groups: [1]}]\n"
                                    "engine: {block_length: 32, max_batch: 256}\n"
                                    "scheduler: {profile: cost.yaml, quality: q.yaml, accuracy_budget: none}\n",
                                    dir.string());
  std::vector<sim::sim_request> reqs(10, sim::sim_request{0.0, 100, 32});
  for (bool strict : {false, true})
    for (const char* p : {"static", "dilaserve"}) {
      for (auto& r : reqs) r.reject_on_miss = strict;
      sim::run_config rc;
      rc.policy = policy::make_policy_set(p);
      rc.slo_scale = 2.0;
      const auto res = sim::simulate(c, reqs, rc);
      const auto row = sim::summarize(res, p, 1.0, 2.0);
      BOOST_TEST(row.rejected == (strict ? 7u : 0u), p);
      BOOST_TEST(row.dropped == 0u, p);
      BOOST_TEST(res.stats.rejected == row.rejected);
      if (strict) {
        BOOST_TEST(res.stats.first_rejection.find("cannot meet its deadline") != std::string::npos);
        for (std::size_t i = 3; i < reqs.size(); ++i) BOOST_TEST((res.requests[i].rejected && res.requests[i].finish_s < 0));
      }
      if (std::string(p) == "static") {
        // Serving all ten: the second step carries all of them (10 + 10 x 12 ms) and everyone
        // misses. Strict: 0-22 ms the first refresh; 22-68 ms {first reuse, two refreshes}: the
        // first is done by 68 ms (on time); the other two end at 102 ms. 1 of 10 on time.
        BOOST_TEST(row.slo_attainment == (strict ? 0.1 : 0.0), tt::tolerance(1e-12));
        if (strict) BOOST_TEST(res.requests[0].finish_s == 0.068, tt::tolerance(1e-12));
      }
    }
}

BOOST_AUTO_TEST_CASE(the_oldest_missed_request_leads_every_step_once_past_its_grace) {
  auto q = test::two_step_quality();
  auto cost = test::flat_cost(0.001, 1e-5);
  policy::scheduler_config cfg;
  cfg.token_budget = 1500;  // one refresh per step
  cfg.missed_grace = 0;     // default 1 window: set below
  // At 5 s: A (arrived 0, due 1 s) and B (arrived 2, due 3 s) have missed, C (due 5.5 s) is
  // on time. Without the rule C goes first and the missed ones after it, shortest first;
  // with it the oldest missed, A, leads.
  std::vector<policy::request_view> a{test::request(2, 2.0, 3.0, 968, 32), test::request(1, 0.0, 1.0, 968, 32),
                                      test::request(3, 4.9, 5.5, 968, 32)};
  std::vector<int> out;
  policy::form_batch(a, 5.0, cfg, q, 0.05, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({1}), tt::per_element());
  cfg.oldest_missed_first = false;
  policy::form_batch(a, 5.0, cfg, q, 0.05, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({2}), tt::per_element());
  // The default grace, one window: A (4 windows past) leads.
  cfg.oldest_missed_first = true;
  cfg.missed_grace = policy::scheduler_config{}.missed_grace;
  BOOST_TEST(cfg.missed_grace == 1.0);
  policy::form_batch(a, 5.0, cfg, q, 0.05, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({1}), tt::per_element());
  // Grace of 3 windows: A is 4 windows past its deadline and still leads; with 5, neither A
  // (4) nor B (2) qualifies and C leads again.
  cfg.oldest_missed_first = true;
  cfg.missed_grace = 3;
  policy::form_batch(a, 5.0, cfg, q, 0.05, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({1}), tt::per_element());
  cfg.missed_grace = 5;
  policy::form_batch(a, 5.0, cfg, q, 0.05, out, &cost, 1);
  BOOST_TEST(out == std::vector<int>({2}), tt::per_element());
  // Admission: the leader is admitted even when the EDF test defers the late ones.
  cfg.missed_grace = 0;
  const std::vector<policy::request_view> none;
  auto picked = policy::admit(a, policy::admission_room{1, 1e9}, 5.0, cfg, q, 0.05, &cost, 1, &none);
  BOOST_TEST(picked == std::vector<int>({1}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(overdue_requests_follow_the_on_time_ones_oldest_first) {
  auto q = test::two_step_quality();
  auto cost = test::flat_cost(0.001, 1e-5);
  policy::scheduler_config cfg;  // grace: one window
  // At 5 s: L (arrived 0, due 1 s, four blocks) and L2 (arrived 1, due 2 s, four blocks) and
  // S (arrived 2, due 3 s, one block) are overdue, past their deadline by more than a window;
  // N (arrived 4, due 4.9 s) has missed by 0.1 s, less than its 0.9-s window; C is on time.
  std::vector<policy::request_view> a{test::request(1, 2.0, 3.0, 968, 32), test::request(2, 4.0, 4.9, 968, 32),
                                      test::request(3, 4.9, 5.5, 968, 32), test::request(4, 1.0, 2.0, 968, 128),
                                      test::request(5, 0.0, 1.0, 968, 128)};
  const policy::admission_room room{5, 1e9};
  // L, the oldest, leads; after C the overdue ones go by arrival, L2 before the shorter S,
  // then N, which is not overdue yet, by its remaining work.
  auto order = policy::admit(a, room, 5.0, cfg, q, 0.05, &cost, 1);
  BOOST_TEST(order == std::vector<int>({4, 2, 3, 0, 1}), tt::per_element());
  // Without the rule every late request goes after C, shortest first: L and L2 last.
  cfg.oldest_missed_first = false;
  order = policy::admit(a, room, 5.0, cfg, q, 0.05, &cost, 1);
  BOOST_TEST(order == std::vector<int>({2, 0, 1, 3, 4}), tt::per_element());
}
