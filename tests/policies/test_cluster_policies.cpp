#define BOOST_TEST_MODULE policies_cluster
#include <boost/test/unit_test.hpp>

#include "fixtures.hpp"
#include "policies/migration.hpp"
#include "policies/presets.hpp"
#include "policies/reconfig.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

using namespace dls;
using policy::partition;
using policy::step_kind;
namespace tt = boost::test_tools;

namespace {

policy::forecast mix_forecast(double rate) {
  policy::forecast f;
  f.arrival_rate = rate;
  f.mix = {{200, 32, 0.5}, {1500, 64, 0.3}, {3000, 128, 0.2}};
  return f;
}

policy::reconfig_config reconfig_cfg() {
  policy::reconfig_config c;
  c.slo_scale = 2.0;
  c.tau_levels = {0.9, 0.85, 0.8};
  return c;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(reconfiguration)

BOOST_AUTO_TEST_CASE(partitions_are_enumerated_exactly_once) {
  auto p8 = policy::enumerate_partitions(8, {1, 2, 4, 8});
  BOOST_TEST(p8.size() == 10u);
  BOOST_TEST(p8.front() == partition({8}), tt::per_element());
  BOOST_TEST(p8.back() == partition(8, 1), tt::per_element());
  BOOST_TEST(std::count(p8.begin(), p8.end(), partition({4, 2, 2})) == 1);
  auto p3 = policy::enumerate_partitions(3, {2, 1});
  BOOST_TEST(p3.size() == 2u);
  BOOST_TEST(p3[0] == partition({2, 1}), tt::per_element());
  BOOST_TEST(policy::enumerate_partitions(5, {2, 4}).empty());
}

BOOST_AUTO_TEST_CASE(idle_picks_tp8_and_a_burst_picks_tp1) {
  auto m = test::h100_roofline();
  auto q = test::fastdllm_quality();
  auto cfg = reconfig_cfg();
  std::vector<int> nodes(2, 8);
  std::vector<partition> current(2, partition(8, 1));
  // Idle: every layout is feasible; TP 8 has the lowest latency.
  auto idle = policy::optimize_layout(nodes, current, mix_forecast(0.0), m, q, cfg);
  BOOST_TEST(idle.feasible);
  BOOST_TEST(idle.tau == 0.9);
  for (const auto& p : idle.nodes) BOOST_TEST(p == partition({8}), tt::per_element());
  BOOST_TEST(idle.switch_layout);
  // A burst far above any SLO capacity: no layout is feasible, so maximise throughput. TP 1
  // has no all-reduce, so eight TP-1 groups serve the most.
  auto burst = policy::optimize_layout(nodes, current, mix_forecast(1e5), m, q, cfg);
  BOOST_TEST(!burst.feasible);
  for (const auto& p : burst.nodes) BOOST_TEST(p == partition(8, 1), tt::per_element());
  BOOST_TEST(burst.changed_nodes == 0);
  BOOST_TEST(!burst.switch_layout);
}

BOOST_AUTO_TEST_CASE(plans_meet_the_forecast_with_the_best_tau) {
  auto m = test::h100_roofline();
  auto q = test::fastdllm_quality();
  auto cfg = reconfig_cfg();
  std::vector<int> nodes(4, 8);
  // Half of the largest SLO capacity at tau 0.9: feasible at 0.9 with capacity to spare.
  double cmax = 0;
  for (int tp : {1, 2, 4, 8})
    cmax = std::max(cmax, 8.0 / tp * policy::evaluate_group(m, q, mix_forecast(0).mix, tp, 0.9, cfg).capacity_rps);
  auto plan = policy::optimize_layout(nodes, {}, mix_forecast(0.5 * 4 * cmax), m, q, cfg);
  BOOST_TEST(plan.feasible);
  BOOST_TEST(plan.tau == 0.9);
  BOOST_TEST(plan.capacity_rps >= 0.5 * 4 * cmax);
  BOOST_TEST(plan.switch_layout);  // no current layout given
  // Just above the best tau-0.9 capacity: the optimizer lowers tau rather than fail.
  auto tight = policy::optimize_layout(nodes, {}, mix_forecast(4 * cmax * 1.03), m, q, cfg);
  BOOST_TEST(tight.feasible);
  BOOST_TEST(tight.tau < 0.9);
}

BOOST_AUTO_TEST_CASE(hysteresis_keeps_a_feasible_layout_for_small_gains) {
  auto m = test::h100_roofline();
  auto q = test::fastdllm_quality();
  auto cfg = reconfig_cfg();
  std::vector<int> nodes(2, 8);
  std::vector<partition> current(2, partition({4, 4}));
  auto f = mix_forecast(20.0);
  auto best = policy::optimize_layout(nodes, current, f, m, q, cfg);
  BOOST_REQUIRE(best.feasible);
  // Staying put costs nothing; the optimum is kept when it is already the layout.
  auto again = policy::optimize_layout(nodes, best.nodes, f, m, q, cfg);
  BOOST_TEST(again.changed_nodes == 0);
  BOOST_TEST(!again.switch_layout);
  // A layout kept for no time gains nothing, so a feasible layout is not changed for it.
  cfg.horizon_s = 0;
  auto sticky = policy::optimize_layout(nodes, current, f, m, q, cfg);
  if (sticky.changed_nodes > 0) BOOST_TEST(!sticky.switch_layout);
  BOOST_TEST(std::isfinite(sticky.current_score));
}

BOOST_AUTO_TEST_CASE(decision_time_at_1024_devices) {
  auto m = test::h100_roofline();
  auto q = test::fastdllm_quality();
  auto cfg = reconfig_cfg();
  cfg.tau_levels = {0.9, 0.85, 0.8, 0.75, 0.7};
  std::vector<int> nodes(128, 8);
  std::vector<partition> current(128, partition(8, 1));
  // Overload: no tau level is feasible, so all five are solved before the fallback (the
  // worst case); then a load that tau 0.9 already meets (one level).
  for (double rate : {1e6, 3000.0}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto plan = policy::optimize_layout(nodes, current, mix_forecast(rate), m, q, cfg);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    BOOST_TEST_MESSAGE("optimize_layout, 128 nodes x 8 GPUs, rate " << rate << ": " << s * 1e3
                       << " ms, tau " << plan.tau << ", feasible " << plan.feasible);
    BOOST_TEST(plan.nodes.size() == 128u);
  }
  auto plan = policy::optimize_layout(nodes, current, mix_forecast(3000.0), m, q, cfg);
  BOOST_TEST(plan.nodes.size() == 128u);
}

// Linear costs chosen so the SLO capacity and the throughput disagree, worked out by hand.
// Per query row: TP 1 1 ms, TP 2 0.6 ms; 16 tokens per step (a refresh and one reuse per
// 32-token block); one class P = 96, G = 32: refresh 128 rows, reuse 32 rows.
//   TP 1: alone 128 + 32 = 160 ms; deadline 2 x 160 = 320 ms; rho* = 1 - 160/320 = 0.5.
//   TP 2: alone 76.8 + 19.2 = 96 ms; rho* = 1 - 96/320 = 0.7.
// Throughput (per-row costs, no fixed term, so batching does not help): mu_1 = 1/0.16 =
// 6.25/s, mu_2 = 1/0.096 = 10.42/s. A 2-device node: {1, 1} serves 12.5/s, {2} 10.42/s;
// SLO capacity (u_max 0.9 does not bind): {1, 1} 2 x 6.25 x 0.5 = 6.25/s, {2} 10.42 x 0.7 = 7.29/s.
namespace {

policy::step_cost_model tp12_cost() {
  return policy::step_cost_model::make_linear({{1, {0.0, 0.0, 1e-3, 0.0, 0.0}}, {2, {0.0, 0.0, 0.6e-3, 0.0, 0.0}}});
}

policy::forecast tp12_forecast(double burst_rate, double mean_rate) {
  policy::forecast f;
  f.arrival_rate = burst_rate;
  f.mean_rate = mean_rate;
  f.mix = {{96, 32, 1.0}};
  return f;
}

}  // namespace

BOOST_AUTO_TEST_CASE(slo_capacity_and_throughput_by_hand) {
  auto m = tp12_cost();
  auto q = test::two_step_quality();
  auto cfg = reconfig_cfg();
  const auto mix = tp12_forecast(0, 0).mix;
  auto g1 = policy::evaluate_group(m, q, mix, 1, 0.9, cfg);
  auto g2 = policy::evaluate_group(m, q, mix, 2, 0.9, cfg);
  BOOST_TEST(g1.max_rps == 6.25, tt::tolerance(1e-6));
  BOOST_TEST(g2.max_rps == 1.0 / 0.096, tt::tolerance(1e-6));
  BOOST_TEST(g1.rho_star == 0.5, tt::tolerance(1e-9));
  BOOST_TEST(g2.rho_star == 0.7, tt::tolerance(1e-9));
}

// A path overhead of 40 ms per request is in the deadline (2 x (160 + 40) = 400 ms) and in the
// latency, outside the group: the group has 360 ms, so rho* = 1 - 160/360 at TP 1 and
// 1 - 96/360 at TP 2. The throughput does not depend on it.
BOOST_AUTO_TEST_CASE(the_path_overhead_widens_the_group_s_share_of_the_window_by_s_minus_one_times_it) {
  auto m = tp12_cost();
  auto q = test::two_step_quality();
  auto cfg = reconfig_cfg();
  cfg.request_overhead_s = 0.040;
  const auto mix = tp12_forecast(0, 0).mix;
  auto g1 = policy::evaluate_group(m, q, mix, 1, 0.9, cfg);
  auto g2 = policy::evaluate_group(m, q, mix, 2, 0.9, cfg);
  BOOST_TEST(g1.rho_star == 1.0 - 160.0 / 360.0, tt::tolerance(1e-9));
  BOOST_TEST(g2.rho_star == 1.0 - 96.0 / 360.0, tt::tolerance(1e-9));
  BOOST_TEST(g1.max_rps == 6.25, tt::tolerance(1e-6));
  // With S = 1 the window is the solo latency: a TP-1 group has no room for queueing at all.
  cfg.slo_scale = 1.0;
  BOOST_TEST(policy::evaluate_group(m, q, mix, 1, 0.9, cfg).rho_star == 0.0, tt::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(a_burst_maximises_slo_capacity_and_sustained_overload_throughput) {
  auto m = tp12_cost();
  auto q = test::two_step_quality();
  auto cfg = reconfig_cfg();
  std::vector<int> nodes(2, 2);
  std::vector<partition> ones(2, partition({1, 1}));
  // A burst of 50/s (above every layout's SLO capacity, 2 x 7.29 at best) while the sustained
  // rate, 10/s, is below the best throughput (25/s): maximise SLO capacity, so {2} on both.
  auto burst = policy::optimize_layout(nodes, ones, tp12_forecast(50, 10), m, q, cfg);
  BOOST_TEST(!burst.feasible);
  BOOST_TEST(burst.burst);
  for (const auto& p : burst.nodes) BOOST_TEST(p == partition({2}), tt::per_element());
  BOOST_TEST(burst.capacity_rps == 2 * 0.7 / 0.096, tt::tolerance(1e-6));
  BOOST_TEST(burst.changed_nodes == 2);
  BOOST_TEST(burst.switch_layout);  // 60 s x 2.08 / 50 gained > 2 s x 12.5 / 50 lost (below)
  // Kept through the next burst: no change, no switch.
  auto again = policy::optimize_layout(nodes, burst.nodes, tp12_forecast(50, 10), m, q, cfg);
  BOOST_TEST(again.changed_nodes == 0);
  BOOST_TEST(!again.switch_layout);
  // Sustained overload, 30/s on average (above 25/s): throughput, so {1, 1} on both.
  auto sustained = policy::optimize_layout(nodes, burst.nodes, tp12_forecast(50, 30), m, q, cfg);
  BOOST_TEST(!sustained.burst);
  for (const auto& p : sustained.nodes) BOOST_TEST(p == partition({1, 1}), tt::per_element());
  // Without a separate mean rate the forecast rate is sustained (the old behaviour).
  auto plain = policy::optimize_layout(nodes, ones, tp12_forecast(50, -1), m, q, cfg);
  for (const auto& p : plain.nodes) BOOST_TEST(p == partition({1, 1}), tt::per_element());
  // The switch must repay its regroup: both nodes regroup at once, so for T seconds nothing is
  // on time (attainment 12.5 / 50 lost), against 60 s of (14.58 - 12.5) / 50 gained: it pays
  // while 0.25 T < 2.5, i.e. T < 10 s.
  cfg.horizon_s = 60;
  cfg.regroup_s = 9.9;
  BOOST_TEST(policy::optimize_layout(nodes, ones, tp12_forecast(50, 10), m, q, cfg).switch_layout);
  cfg.regroup_s = 10.1;
  auto sticky = policy::optimize_layout(nodes, ones, tp12_forecast(50, 10), m, q, cfg);
  BOOST_TEST(sticky.changed_nodes == 2);
  BOOST_TEST(!sticky.switch_layout);
  // One node at a time: two waves of T, each losing half the capacity: 2 T x 0.125 < 2.5.
  cfg.nodes_at_once = 1;
  BOOST_TEST(policy::optimize_layout(nodes, ones, tp12_forecast(50, 10), m, q, cfg).switch_layout == (2 * 10.1 * 0.125 < 2.5));
}

BOOST_AUTO_TEST_CASE(a_burst_plan_keeps_up_with_the_sustained_rate) {
  auto m = tp12_cost();
  auto q = test::two_step_quality();
  auto cfg = reconfig_cfg();  // utilization_max 0.9
  std::vector<int> nodes(2, 2);
  std::vector<partition> twos(2, partition({2}));
  // A burst of 50/s over a sustained 19.5/s. {2} on both nodes has the most SLO capacity
  // (2 x 7.29) but serves 2 x 10.42 = 20.8/s, and 0.9 x 20.8 < 19.5: its backlog would never
  // drain. A layout keeps up from 19.5 / 0.9 = 21.7/s of throughput: {2} beside {1, 1}
  // (10.42 + 12.5 = 22.9/s, SLO capacity 7.29 + 6.25 = 13.54) beats {1, 1} on both (12.5).
  auto plan = policy::optimize_layout(nodes, twos, tp12_forecast(50, 19.5), m, q, cfg);
  BOOST_TEST(plan.burst);
  BOOST_REQUIRE(plan.nodes.size() == 2u);
  auto sorted = plan.nodes;
  std::sort(sorted.begin(), sorted.end());
  BOOST_TEST(sorted[0] == partition({1, 1}), tt::per_element());
  BOOST_TEST(sorted[1] == partition({2}), tt::per_element());
  BOOST_TEST(plan.capacity_rps == 0.7 / 0.096 + 2 * 3.125, tt::tolerance(1e-6));
  BOOST_TEST(plan.changed_nodes == 1);
  // The current layout does not keep up, so what it loses is throughput: 60 s of serving
  // 22.9 instead of 20.8 of the 21.7/s it must keep up with (+0.039 of it) repay 2 s with the
  // changed node's 10.4/s gone (0.48 of it).
  BOOST_TEST(plan.switch_layout);
  // A forecast from 2 s of arrivals is evidence for 2 s: 2 x 0.039 does not repay the regroup.
  auto brief = cfg;
  brief.horizon_s = 2;
  auto hasty = policy::optimize_layout(nodes, twos, tp12_forecast(50, 19.5), m, q, brief);
  BOOST_TEST(hasty.changed_nodes == 1);
  BOOST_TEST(!hasty.switch_layout);
  // At 22.6/s sustained only {1, 1} on both keeps up (0.9 x 25 = 22.5 is short too): the
  // sustained-overload plan, most throughput.
  auto full = policy::optimize_layout(nodes, twos, tp12_forecast(50, 22.6), m, q, cfg);
  BOOST_TEST(!full.burst);
  for (const auto& p : full.nodes) BOOST_TEST(p == partition({1, 1}), tt::per_element());
  BOOST_TEST(full.switch_layout);
}

BOOST_AUTO_TEST_CASE(a_regroup_pays_only_if_its_gain_over_the_dwell_repays_the_outage) {
  policy::reconfig_config cfg;
  cfg.horizon_s = 60;
  // 10 req/s on a layout of capacity 20 and mean isolated latency 0.1 s (J = 0.1 / 0.5 = 0.2 s)
  // against a plan of the same capacity at 0.08 s (J = 0.16 s): 10 x 60 x 0.04 = 24 s gained.
  // The changed nodes hold 5 of the 20: while they regroup, J = 0.1 / (1 - 10 / 15) = 0.3 s,
  // so the regroup costs 10 x T x 0.1 = T latency-seconds: it pays for T < 24 s.
  cfg.regroup_s = 23;
  BOOST_TEST(policy::switch_pays(10, 20, 2, 20, 1.6, 1, 5, 0.5, false, cfg));
  cfg.regroup_s = 25;
  BOOST_TEST(!policy::switch_pays(10, 20, 2, 20, 1.6, 1, 5, 0.5, false, cfg));
  // The changed nodes hold 15: the rest (5) falls behind, 5 T excess arrivals wait T / 2 and
  // then 5 T / (2 x (20 - 10)) to drain: 3.75 T^2 < 24 iff T < 2.53 s.
  cfg.regroup_s = 2.5;
  BOOST_TEST(policy::switch_pays(10, 20, 2, 20, 1.6, 1, 15, 1.5, false, cfg));
  cfg.regroup_s = 2.6;
  BOOST_TEST(!policy::switch_pays(10, 20, 2, 20, 1.6, 1, 15, 1.5, false, cfg));
  // No load: nobody waits for the regroup, and the faster layout wins.
  BOOST_TEST(policy::switch_pays(0, 20, 2, 20, 1.6, 1, 15, 1.5, false, cfg));
  BOOST_TEST(!policy::switch_pays(0, 20, 1.6, 20, 2, 1, 15, 1.5, false, cfg));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(migration)

BOOST_AUTO_TEST_CASE(refresh_boundary_moves_only_the_canvas) {
  policy::link_params link;
  auto r = test::request(1, 0, 1, 1968, 32);  // L = 2000, next step is a refresh
  auto c = policy::move_cost(r, false, 0.05, link);
  BOOST_TEST(c.bytes == 4.0 * 2000 + 64);
  BOOST_TEST(!c.kv_moved);
  BOOST_TEST(c.seconds == link.latency_s + c.bytes / link.inter_node_bytes_per_s, tt::tolerance(1e-12));
  // Mid-block: 1 GB of KV at 50 GB/s = 21 ms against a 1 ms rebuild: rebuild.
  r.steps_in_block = 1;
  r.masks_left_in_block = 20;
  r.next_kind = step_kind::reuse;
  c = policy::move_cost(r, false, 0.001, link);
  BOOST_TEST(c.rebuild);
  BOOST_TEST(!c.kv_moved);
  // Against a 1 s rebuild the KV moves: bytes = canvas + 512 KiB x L.
  c = policy::move_cost(r, true, 1.0, link);
  BOOST_TEST(c.kv_moved);
  BOOST_TEST(c.bytes == 4.0 * 2000 + 64 + 524288.0 * 2000);
}

namespace {
// Step time = 10 ms per request in the batch, so adding a request slows a group down.
policy::step_cost_model per_request_cost() {
  return policy::step_cost_model::make_linear({{1, {0.0, 0.01, 0.0, 0.0, 0.0}}});
}
policy::group_summary summary(int id, int node, const std::vector<policy::request_view>& reqs, double step) {
  policy::group_summary s;
  s.id = id;
  s.node = node;
  for (const auto& r : reqs) s.load.add(r.canvas_len());
  s.active = static_cast<int>(reqs.size());
  s.kv_free_tokens = 1e9;
  s.step_s = step;
  s.steps_per_block = 2;
  return s;
}
}  // namespace

BOOST_AUTO_TEST_CASE(never_moves_a_request_to_a_group_that_would_then_miss) {
  auto m = per_request_cost();
  auto q = test::two_step_quality();
  policy::migration_config cfg;
  policy::link_params link;
  // g0 is slow (100 ms steps): r needs 2 steps, 200 ms > its 50 ms budget, so it is at risk.
  std::vector<policy::request_view> g0{test::request(1, 0, 0.05, 100, 32)};
  // g2 holds a request that meets its 25 ms deadline alone (2 x 10 ms) but not with a second
  // request in the batch (2 x 20 ms).
  std::vector<policy::request_view> g1{}, g2{test::request(2, 0, 0.025, 100, 32)};
  auto s0 = summary(0, 0, g0, 0.1);
  s0.at_risk = true;
  auto s1 = summary(1, 1, g1, 0.0), s2 = summary(2, 0, g2, 0.01);
  auto moves = policy::plan_migrations({s0, s1, s2}, {&g0, &g1, &g2}, 0.0, m, q, cfg, link);
  BOOST_REQUIRE_EQUAL(moves.size(), 1u);
  BOOST_TEST(moves[0].request == 1u);
  BOOST_TEST(moves[0].from == 0);
  BOOST_TEST(moves[0].to == 1);
  BOOST_TEST(!moves[0].cost.kv_moved);  // it sits at a refresh boundary
  // Without the empty group the only destination would miss: no move at all.
  moves = policy::plan_migrations({s0, s2}, {&g0, &g2}, 0.0, m, q, cfg, link);
  BOOST_TEST(moves.empty());
  // If g2's request had room, the move would be fine.
  g2[0].deadline_s = 1.0;
  moves = policy::plan_migrations({s0, s2}, {&g0, &g2}, 0.0, m, q, cfg, link);
  BOOST_REQUIRE_EQUAL(moves.size(), 1u);
  BOOST_TEST(moves[0].to == 2);
  // Groups not at risk are left alone.
  s0.at_risk = false;
  BOOST_TEST(policy::plan_migrations({s0, s2}, {&g0, &g2}, 0.0, m, q, cfg, link).empty());
}

BOOST_AUTO_TEST_CASE(a_move_counts_the_layers_a_split_refresh_would_lose) {
  auto m = per_request_cost();  // a refresh alone takes 10 ms
  auto q = test::two_step_quality();
  policy::migration_config cfg;
  policy::link_params link;
  // r needs 2 steps: 20 ms on the empty g1, within its 22 ms. Half-way through a split refresh
  // it would run those 16 layers again there (5 ms): 25 ms misses, so it stays.
  std::vector<policy::request_view> g0{test::request(1, 0, 0.022, 100, 32)}, g1{};
  auto s0 = summary(0, 0, g0, 0.1);
  s0.at_risk = true;
  auto s1 = summary(1, 0, g1, 0.0);
  BOOST_TEST(policy::plan_migrations({s0, s1}, {&g0, &g1}, 0.0, m, q, cfg, link).size() == 1u);
  g0[0].refresh_done = 0.5;
  BOOST_TEST(policy::plan_migrations({s0, s1}, {&g0, &g1}, 0.0, m, q, cfg, link).empty());
  g0[0].deadline_s = 0.026;
  BOOST_TEST(policy::plan_migrations({s0, s1}, {&g0, &g1}, 0.0, m, q, cfg, link).size() == 1u);
}

BOOST_AUTO_TEST_CASE(balance_mode_evens_out_requests_per_device) {
  auto q = test::two_step_quality();
  policy::migration_config cfg;
  cfg.mode = policy::migration_mode::balance;
  policy::link_params link;
  std::vector<policy::request_view> g0, g1;
  for (int i = 0; i < 6; ++i) {
    auto r = test::request(i, 0, 10, 100, 32);
    if (i % 2 == 0) {  // mid-block: costs more to move
      r.steps_in_block = 1;
      r.masks_left_in_block = 16;
      r.next_kind = step_kind::reuse;
    }
    g0.push_back(r);
  }
  // Refresh costs 10 us per query row more than reuse, so a mid-block move is dearer.
  auto flat = test::flat_cost(0.001, 1e-5);
  auto moves = policy::plan_migrations({summary(0, 0, g0, 0.06), summary(1, 0, g1, 0.0)}, {&g0, &g1}, 0.0,
                                       flat, q, cfg, link);
  // 6 vs 0 -> 5 vs 1 -> 4 vs 2, where 4 <= 1.5 x 2 + 1 stops it.
  BOOST_REQUIRE_EQUAL(moves.size(), 2u);
  for (const auto& mv : moves) {
    BOOST_TEST(mv.request % 2 == 1u);  // canvas-only moves first
    BOOST_TEST(mv.to == 1);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(presets)

BOOST_AUTO_TEST_CASE(each_policy_switches_the_documented_mechanisms) {
  auto s = policy::make_policy_set("static");
  BOOST_TEST((s.order == policy::queue_order::fcfs && !s.tau_per_request && !s.reconfigure &&
              s.migration == policy::migration_mode::none));
  auto d = policy::make_policy_set("dilaserve");
  BOOST_TEST((d.order == policy::queue_order::least_slack && d.tau_per_request && d.tau_load_cap &&
              d.reconfigure && d.migration == policy::migration_mode::deadline));
  BOOST_TEST((policy::make_policy_set("migration").migration == policy::migration_mode::balance));
  BOOST_TEST(!policy::make_policy_set("no-reconfig").reconfigure);
  BOOST_TEST(policy::make_policy_set("tau-only").tau_load_cap);
  // The cumulative ablation: each step adds one mechanism to the one before.
  auto dt = policy::make_policy_set("deadline-tau");
  BOOST_TEST((dt.order == policy::queue_order::least_slack && dt.demote_late && dt.tau_per_request &&
              dt.tau_load_cap && !dt.reconfigure && dt.migration == policy::migration_mode::none));
  auto nm = policy::make_policy_set("no-migrate");
  BOOST_TEST((nm.order == dt.order && nm.tau_per_request && nm.reconfigure && nm.migration == policy::migration_mode::none));
  for (const auto& n : policy::policy_set_names()) BOOST_TEST(policy::make_policy_set(n).name == n);
  BOOST_CHECK_THROW(policy::make_policy_set("fastest"), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

// Mid-block, the measured link decides between moving the KV cache and one refresh at the
// destination: a fast link moves it, a slow one rebuilds, and the figures come from the profile.
BOOST_AUTO_TEST_CASE(kv_transfer_or_recompute_follows_the_measured_link) {
  const auto m = policy::parse_step_cost_profile(
      "kind: linear\nlinear: {1: {per_query_row_s: 0.001}}\n"
      "transfer: [{tls: tcp, bytes_per_s: 1.0e9, latency_s: 1.0e-4}, {tls: slow, bytes_per_s: 1.0e6, latency_s: 0}]\n");
  BOOST_REQUIRE(m.transfer.size() == 2u);
  const double kv = 16.0 * (1 << 20);
  const auto fast = policy::compare_kv_move(kv, m.transfer[0], m, 1, 1024, 32);
  BOOST_TEST(fast.transfer_s == 1e-4 + kv / 1e9, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(fast.recompute_s == (1024 - 32) * 1e-3, boost::test_tools::tolerance(1e-9));  // refresh - reuse rows
  BOOST_TEST(fast.transfer);
  const auto slow = policy::compare_kv_move(kv, m.transfer[1], m, 1, 1024, 32);
  BOOST_TEST(!slow.transfer);
  BOOST_CHECK_THROW(policy::compare_kv_move(kv, m.transfer[0], m, 4, 1024, 32), std::invalid_argument);
  BOOST_CHECK_THROW(policy::compare_kv_move(kv, policy::transfer_link{}, m, 1, 1024, 32), std::invalid_argument);
  BOOST_CHECK_THROW(policy::parse_step_cost_profile("kind: linear\nlinear: {1: {fixed_s: 0.001}}\n"
                                                    "transfer: [{tls: tcp, bytes_per_s: 0}]\n"),
                    std::invalid_argument);
}
