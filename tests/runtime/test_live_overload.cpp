// Load shedding in a group's step decision, without a cluster: with on_overload: refuse a
// burst far above what the group can finish in time is partly refused, after the tau controller
// lowered tau in the same decision, and never before some tau is lowered; at normal load
// nothing is refused; only requests no
// decision has seen are refused; floors and pins count; without the knob (every set's default,
// and static's FCFS) nothing is ever refused; the cluster file names a bad value in one line.
#define BOOST_TEST_MODULE test_live_overload
#include <boost/test/unit_test.hpp>

#include "live_decision_fixture.hpp"
#include "policies/group_step.hpp"
#include "policies/overload.hpp"
#include "policies/presets.hpp"
#include "runtime/cluster_config.hpp"

#include <set>
#include <string>

namespace pol = dls::policy;
namespace rt = dls::runtime;

namespace {

pol::group_policy policy(const std::string& name, bool refuse, int max_active = 8) {
  pol::group_knobs k;
  k.max_batch = 8;
  k.max_active = max_active;
  k.tau_max = 0.9;
  k.tau_min = 0.7;
  k.refuse_overload = refuse;
  return pol::make_group_policy(pol::make_policy_set(name), k);
}

// A burst of n requests at t = 0, each due 50 ms later: one alone needs 16 steps of 1.1 ms at
// tau 0.9 (18 ms) and 4 at tau 0.7, so the group (8 at a time) finishes only some in time.
pol::group_snapshot burst(int n) {
  pol::group_snapshot g;
  g.group.tp = 1;
  for (int i = 1; i <= n; ++i) {
    g.queued.push_back(dls::test::fresh_request(static_cast<uint64_t>(i), 0.0, 0.05));
    g.fresh.push_back(static_cast<uint64_t>(i));
  }
  return g;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_burst_far_above_capacity_is_partly_refused_after_tau_went_down) {
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  auto g = burst(400);
  const auto d = pol::decide_step(g, policy("dilaserve", true), &m, q);
  BOOST_TEST(d.controlled);
  BOOST_TEST(!d.refused.empty());
  BOOST_TEST(d.refused.size() < 400u);
  // Every request is either refused, admitted or still queued: none vanished.
  std::set<uint64_t> seen;
  for (const auto& r : d.refused) seen.insert(r.id);
  for (const auto& r : g.active) seen.insert(r.id);
  for (const auto& r : g.queued) seen.insert(r.id);
  BOOST_TEST(seen.size() == 400u);
  BOOST_TEST(d.refused.size() + g.active.size() + g.queued.size() == 400u);
  // The requests kept were given a lower tau by the controller in this very decision.
  double lowest = 1;
  for (const auto* list : {&g.active, &g.queued})
    for (const auto& r : *list) lowest = std::min(lowest, r.tau);
  BOOST_TEST(lowest < 0.9);
  // The reason is one line with the numbers behind it.
  const auto& why = d.refused.front().reason;
  BOOST_TEST(why.find("after its deadline even at tau 0.70") != std::string::npos, why);
  BOOST_TEST(why.find("the group owes") != std::string::npos, why);
  BOOST_TEST(why.find('\n') == std::string::npos);
}

BOOST_AUTO_TEST_CASE(normal_load_is_never_refused) {
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  // Four requests, each due 50 ms after arriving, while four others run: the group needs
  // well under that for all of them.
  pol::group_snapshot g;
  g.now_s = 1.0;
  g.group.tp = 1;
  for (uint64_t i = 1; i <= 4; ++i) g.active.push_back(dls::test::fresh_request(i, 0.99, 1.04));
  for (uint64_t i = 5; i <= 8; ++i) {
    g.queued.push_back(dls::test::fresh_request(i, 1.0, 1.05));
    g.fresh.push_back(i);
  }
  const auto d = pol::decide_step(g, policy("dilaserve", true), &m, q);
  BOOST_TEST(d.refused.empty());
  // And a lone request on an idle group is admitted, whatever its deadline.
  auto lone = burst(1);
  lone.queued[0].deadline_s = 1e-6;
  const auto dl = pol::decide_step(lone, policy("dilaserve", true), &m, q);
  BOOST_TEST(dl.refused.empty());
  BOOST_TEST(dl.admitted.size() == 1u);
}

BOOST_AUTO_TEST_CASE(only_requests_no_decision_has_seen_are_refused) {
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  auto g = burst(400);
  g.fresh.clear();
  const auto d = pol::decide_step(g, policy("dilaserve", true), &m, q);
  BOOST_TEST(d.refused.empty());
  // One fresh request at the end of the same queue is refused: the others owe too much.
  auto h = burst(400);
  h.fresh = {400};
  const auto e = pol::decide_step(h, policy("dilaserve", true), &m, q);
  BOOST_REQUIRE_EQUAL(e.refused.size(), 1u);
  BOOST_TEST(e.refused[0].id == 400u);
}

BOOST_AUTO_TEST_CASE(the_lowest_tau_counts_the_floor_and_the_pin) {
  const auto p = policy("dilaserve", true);
  auto r = dls::test::fresh_request(1, 0, 1);
  BOOST_TEST(pol::lowest_tau(r, p) == 0.7);
  r.tau_floor = 0.85;
  BOOST_TEST(pol::lowest_tau(r, p) == 0.85);
  r.tau_pinned = true;
  r.tau = 0.9;
  BOOST_TEST(pol::lowest_tau(r, p) == 0.9);
  // Without tau control a request runs at the reference tau.
  BOOST_TEST(pol::lowest_tau(dls::test::fresh_request(2, 0, 1), policy("static", true)) == 0.9);
  // A floor can make the difference: alone at tau 0.7 a request due in 8 ms (plus one window of
  // grace: 16 ms) fits (4 steps, 4.4 ms); held at 0.9 (16 steps, 17.6 ms) it does not.
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  auto g = burst(0);
  g.active.push_back(dls::test::fresh_request(9, 0, 1000));  // its one slot is taken: both stay queued
  auto a = dls::test::fresh_request(10, 0, 0.008), b = dls::test::fresh_request(11, 0, 0.008);
  b.tau_floor = 0.9;
  g.queued = {a, b};
  g.fresh = {10, 11};
  const auto d = pol::decide_step(g, policy("dilaserve", true, 1), &m, q);
  BOOST_REQUIRE_EQUAL(d.refused.size(), 1u);
  BOOST_TEST(d.refused[0].id == 11u);
}

BOOST_AUTO_TEST_CASE(no_refusal_before_some_tau_is_lowered_and_the_request_stays_new_for_later) {
  // The request floored at 0.9 that the case above refuses, alone in the queue behind a lax
  // request: the controller lowers nobody's tau (nobody can use it: the lax one has slack and
  // the floored one may not go lower), so the group does not refuse yet.
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  auto g = burst(0);
  g.active.push_back(dls::test::fresh_request(9, 0, 1000));
  auto b = dls::test::fresh_request(11, 0, 0.008);
  b.tau_floor = 0.9;
  g.queued = {b};
  g.fresh = {11};
  const auto d = pol::decide_step(g, policy("dilaserve", true, 1), &m, q);
  BOOST_TEST(d.controlled);
  for (const auto& r : g.active) BOOST_TEST(r.tau == 0.9);
  BOOST_TEST(d.refused.empty());
  BOOST_TEST(d.shedding_deferred);
  // Without tau control there is nothing to lower first: the same request is refused at once.
  auto h = burst(0);
  h.active.push_back(dls::test::fresh_request(9, 0, 1000));
  h.queued = {b};
  h.fresh = {11};
  const auto e = pol::decide_step(h, policy("deadline", true, 1), &m, q);
  BOOST_REQUIRE_EQUAL(e.refused.size(), 1u);
  BOOST_TEST(!e.shedding_deferred);
}

BOOST_AUTO_TEST_CASE(tau_lowered_only_for_the_requests_it_would_refuse_does_not_count) {
  // A request due in 1 ms (2 ms with its grace window) cannot finish even at tau 0.7 (4 steps,
  // 4.4 ms), and the controller lowers its tau trying; the lax request running keeps 0.9. Were
  // it refused, the group would go on at the reference tau while refusing (a live cluster under
  // a burst did so), so shedding waits for the requests that stay to run at a lowered tau.
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  auto g = burst(0);
  g.active.push_back(dls::test::fresh_request(9, 0, 1000));
  g.queued = {dls::test::fresh_request(11, 0, 0.001)};
  g.fresh = {11};
  const auto d = pol::decide_step(g, policy("dilaserve", true, 1), &m, q);
  BOOST_TEST(d.controlled);
  BOOST_REQUIRE_EQUAL(g.queued.size(), 1u);
  BOOST_TEST(g.queued[0].tau < 0.9, "the scenario needs the controller to lower the hopeless request's tau");
  BOOST_TEST(g.active[0].tau == 0.9);
  BOOST_TEST(d.refused.empty());
  BOOST_TEST(d.shedding_deferred);
  // (a_burst_far_above_capacity_is_partly_refused_after_tau_went_down is the case where it is.)
}

BOOST_AUTO_TEST_CASE(without_the_knob_nothing_is_refused_and_static_stays_fcfs) {
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  for (const char* name : {"static", "deadline", "dilaserve"}) {
    auto g = burst(400);
    const auto d = pol::decide_step(g, policy(name, false), &m, q);
    BOOST_TEST(d.refused.empty(), name);
    BOOST_TEST(d.admitted.size() + g.queued.size() == 400u, name);
  }
  // Static without the knob admits in arrival order, as before.
  auto g = burst(20);
  const auto d = pol::decide_step(g, policy("static", false), &m, q);
  BOOST_REQUIRE_EQUAL(d.admitted.size(), 8u);
  for (std::size_t i = 0; i < 8; ++i) BOOST_TEST(d.admitted[i] == i + 1);
  // With the knob, static refuses at the reference tau and keeps FCFS for what it keeps.
  auto s = burst(400);
  const auto e = pol::decide_step(s, policy("static", true), &m, q);
  BOOST_TEST(!e.refused.empty());
  BOOST_TEST(e.refused.front().reason.find("even at tau 0.90") != std::string::npos, e.refused.front().reason);
  for (std::size_t i = 0; i < e.admitted.size(); ++i) BOOST_TEST(e.admitted[i] == i + 1);
}

BOOST_AUTO_TEST_CASE(without_step_costs_nothing_is_refused) {
  const auto q = dls::test::small_quality();
  auto g = burst(400);
  const auto d = pol::decide_step(g, policy("dilaserve", true), nullptr, q);
  BOOST_TEST(d.refused.empty());
}

namespace {

std::string config_with(const std::string& scheduler) {
  return "name: t\nauth: {token: abcdefghij}\nhead: {host: 127.0.0.1, port: 0}\n"
         "nodes: [{name: n0, devices: {kind: cpu, count: 1}}]\nmodel: {path: m}\n" + scheduler;
}

// A two-word scheduler choice: absent or `off` leaves `flag` false, `on` sets it, and any other
// word is refused in one line that names the key and the word.
void expect_strict_choice(const std::string& key, const std::string& on, const std::string& off,
                          bool rt::scheduler_settings::*flag) {
  auto parse = [](const std::string& text) {
    return rt::parse_cluster_config(config_with(text), "c.yaml", "/tmp").scheduler;
  };
  const bool absent = parse("").*flag;
  const bool set_on = parse("scheduler: {policy: dilaserve, " + key + ": " + on + "}\n").*flag;
  const bool set_off = parse("scheduler: {" + key + ": " + off + "}\n").*flag;
  BOOST_TEST(!absent, key);
  BOOST_TEST(set_on, key);
  BOOST_TEST(!set_off, key);
  std::string error;
  try {
    parse("scheduler: {" + key + ": drop}\n");
  } catch (const rt::config_error& e) {
    error = e.what();
  }
  BOOST_TEST(error.find("scheduler." + key) != std::string::npos, error);
  BOOST_TEST(error.find("'drop'") != std::string::npos, error);
  BOOST_TEST(error.find('\n') == std::string::npos);
}

}  // namespace

BOOST_AUTO_TEST_CASE(on_overload_parses_strictly) {
  expect_strict_choice("on_overload", "refuse", "queue", &rt::scheduler_settings::refuse_overload);
}

BOOST_AUTO_TEST_CASE(the_backlog_and_the_refusal_at_placement) {
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  const auto p = policy("dilaserve", true);
  pol::group_snapshot idle;
  BOOST_TEST(pol::backlog_s(idle, p, m, q) == 0.0);
  // Eight requests of 16 steps at tau 0.9 in full batches of 8: 16 steps of 1.8 ms.
  auto g = burst(8);
  BOOST_TEST(pol::backlog_s(g, p, m, q) == 16 * 1.8e-3, boost::test_tools::tolerance(1e-9));
  // At tau 0.7 each needs 4 steps.
  for (auto& r : g.queued) r.tau = 0.7;
  BOOST_TEST(pol::backlog_s(g, p, m, q) == 4 * 1.8e-3, boost::test_tools::tolerance(1e-9));
  // A 100 ms SLO with one window of grace may wait 200 ms.
  BOOST_TEST(pol::refuse_at_placement(0.2, 0.1, 1.0).empty());
  const auto why = pol::refuse_at_placement(0.25, 0.1, 1.0);
  BOOST_TEST(why.find("owes 0.250 s of work, over the 0.200 s") != std::string::npos, why);
  // Without an SLO the head leaves it to the group.
  BOOST_TEST(pol::refuse_at_placement(1e9, 0, 1.0).empty());
}

// on_miss: reject in the live step decision: the same refusals, with the same reasons, as the
// simulator's call of policy::refuse_if_late on each strict request against what the group
// holds before it; refused before admission (never started), apart from load shedding, and
// only among fresh requests; without the knob nothing is refused.
BOOST_AUTO_TEST_CASE(strict_slos_are_refused_at_the_first_decision_as_the_simulator_does) {
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  auto p = policy("dilaserve", false);
  p.reject_on_miss = true;
  auto g = burst(400);
  g.queued[0].deadline_s = 1e-4;  // cannot make it even alone at tau 0.7 (4 steps of 1.1 ms)
  // What the simulator would refuse: each request against the ones queued before it that stay.
  std::vector<std::pair<uint64_t, std::string>> expected;
  std::vector<pol::request_view> before;
  for (const auto& r : g.queued) {
    auto why = pol::refuse_if_late(r, {}, before, 0.0, p.sched, q, m, 1, pol::lowest_tau(r, p));
    if (why.empty())
      before.push_back(r);
    else
      expected.emplace_back(r.id, why);
  }
  BOOST_REQUIRE(!expected.empty());
  BOOST_REQUIRE(expected.size() < 400u);
  BOOST_TEST(expected.front().first == 1u);
  BOOST_TEST(expected.front().second.find("alone at tau 0.70") != std::string::npos, expected.front().second);
  const auto d = pol::decide_step(g, p, &m, q);
  BOOST_REQUIRE_EQUAL(d.rejected.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    BOOST_TEST(d.rejected[i].id == expected[i].first);
    BOOST_TEST(d.rejected[i].reason == expected[i].second);
    BOOST_TEST(d.rejected[i].reason.find('\n') == std::string::npos);
  }
  BOOST_TEST(d.refused.empty());  // load shedding is off: only strict refusals
  for (const auto& r : d.rejected) {
    for (auto id : d.admitted) BOOST_TEST(id != r.id);
    for (const auto& k : g.queued) BOOST_TEST(k.id != r.id);
  }
  BOOST_TEST(d.rejected.size() + g.active.size() + g.queued.size() == 400u);
  // A request a decision has seen is never refused later.
  auto again = pol::decide_step(g, p, &m, q);
  BOOST_TEST(again.rejected.empty());
  // Without the knob the same burst is served (queued), not refused.
  auto served = burst(400);
  served.queued[0].deadline_s = 1e-4;
  const auto ds = pol::decide_step(served, policy("dilaserve", false), &m, q);
  BOOST_TEST(ds.rejected.empty());
  BOOST_TEST(served.active.size() + served.queued.size() == 400u);
}

BOOST_AUTO_TEST_CASE(on_miss_parses_strictly) {
  expect_strict_choice("on_miss", "reject", "serve", &rt::scheduler_settings::reject_on_miss);
}

// Per request: a client's strict SLO is refused the same way under a set without the knob,
// and a request without it is not.
BOOST_AUTO_TEST_CASE(a_strict_request_is_refused_without_the_cluster_wide_knob) {
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  auto g = burst(2);
  for (auto& r : g.queued) r.deadline_s = 1e-4;  // neither can make it
  g.queued[1].reject_on_miss = true;
  const auto d = pol::decide_step(g, policy("dilaserve", false), &m, q);
  BOOST_REQUIRE_EQUAL(d.rejected.size(), 1u);
  BOOST_TEST(d.rejected[0].id == 2u);
  BOOST_TEST(d.rejected[0].reason.find("alone at tau 0.70") != std::string::npos, d.rejected[0].reason);
  BOOST_TEST(g.active.size() + g.queued.size() == 1u);  // the other is served late
}
