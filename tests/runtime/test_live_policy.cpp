// The live side of the one decision path, without a cluster: the snapshot adapter builds from a
// canvas and a group's live state exactly the views a hand-written snapshot holds; the step
// decision a group makes honours deadlines, pinned taus and floors; placement balances work per
// device; the cluster file names a bad policy or knob in one line.
#define BOOST_TEST_MODULE test_live_policy
#include <boost/test/unit_test.hpp>

#include "actors/decision_record.hpp"
#include "actors/policy_view.hpp"
#include "actors/slo_overhead_book.hpp"
#include "gpu/canvas.hpp"
#include "policies/forecast.hpp"
#include "policies/reconfig.hpp"
#include "live_decision_fixture.hpp"
#include "policies/group_step.hpp"
#include "policies/placement.hpp"
#include "policies/presets.hpp"
#include "runtime/cluster_config.hpp"

#include <string>
#include <tuple>
#include <vector>

namespace act = dls::actors;
namespace pol = dls::policy;
namespace rt = dls::runtime;

namespace {

constexpr int32_t mask = 1;
constexpr int32_t eos = 0;

// A canvas of 4 prompt tokens and 16 answer tokens in blocks of 8, in block 1 after two steps
// there, with 3 of that block's 8 positions decided.
dls::gpu::canvas sample_canvas() {
  dls::gpu::decode_params p;
  p.gen_length = 16;
  p.block_length = 8;
  p.cache = dls::gpu::cache_mode::dual;
  p.refresh_interval = 0;
  auto c = dls::gpu::canvas::start({5, 6, 7, 8}, p, mask, eos);
  for (int i = 4; i < 12; ++i) c.ids[static_cast<std::size_t>(i)] = 9;  // block 0 done
  for (int i = 12; i < 15; ++i) c.ids[static_cast<std::size_t>(i)] = 10;
  c.block = 1;
  c.step_in_block = 2;
  c.steps = 4;
  return c;
}

bool same(const pol::request_view& a, const pol::request_view& b) {
  return a.id == b.id && a.arrival_s == b.arrival_s && a.deadline_s == b.deadline_s && a.tau == b.tau &&
         a.tau_low == b.tau_low && a.tau_pinned == b.tau_pinned && a.tau_floor == b.tau_floor && a.prompt_len == b.prompt_len &&
         a.gen_len == b.gen_len && a.block_len == b.block_len && a.blocks_done == b.blocks_done &&
         a.steps_in_block == b.steps_in_block && a.masks_left_in_block == b.masks_left_in_block &&
         a.next_kind == b.next_kind && a.refresh_done == b.refresh_done && a.group == b.group;
}

pol::group_policy policy_named(const std::string& name, int max_batch = 1) {
  pol::group_knobs k;
  k.max_batch = max_batch;
  k.tau_max = 0.9;
  k.tau_min = 0.7;
  return pol::make_group_policy(pol::make_policy_set(name), k);
}

}  // namespace

BOOST_AUTO_TEST_CASE(adapter_builds_what_a_hand_written_snapshot_holds) {
  const auto c = sample_canvas();
  const auto prog = act::progress_of(c);
  act::live_request lr;
  lr.id = 42;
  lr.arrival_s = 1.5;
  lr.deadline_s = 3.25;
  lr.tau = 0.85;
  lr.tau_low = 0.8;
  lr.tau_floor = 0.8;
  lr.group = 3;
  lr.progress = prog;

  pol::request_view want;
  want.id = 42;
  want.arrival_s = 1.5;
  want.deadline_s = 3.25;
  want.tau = 0.85;
  want.tau_low = 0.8;
  want.tau_floor = 0.8;
  want.prompt_len = 4;
  want.gen_len = 16;
  want.block_len = 8;
  want.blocks_done = 1;
  want.steps_in_block = 2;
  want.masks_left_in_block = 5;
  want.next_kind = pol::step_kind::reuse;
  want.group = 3;
  BOOST_TEST(same(act::view_of(lr), want));

  // A fresh canvas: block 0, no step yet, so its next step is a refresh.
  auto f = dls::gpu::canvas::start({5, 6}, c.params, mask, eos);
  act::live_request lf;
  lf.id = 7;
  lf.progress = act::progress_of(f);
  const auto vf = act::view_of(lf);
  BOOST_TEST(vf.blocks_done == 0);
  BOOST_TEST(vf.steps_in_block == 0);
  BOOST_TEST(vf.masks_left_in_block == 0);
  BOOST_TEST(vf.masks_now() == 8);
  BOOST_TEST((vf.next_kind == pol::step_kind::refresh));
  BOOST_TEST(vf.canvas_len() == 18);

  // The group snapshot: views in the group's order, the queue's ids, KV left after the active.
  act::live_group g;
  g.id = 3;
  g.tp = 2;
  g.devices = {0, 1};
  g.kv_capacity_tokens = 100;
  g.tau_cap = 0.8;
  const auto s = act::snapshot_of(g, 9.0, {&lr}, {&lf});
  BOOST_TEST(s.now_s == 9.0);
  BOOST_TEST(s.group.id == 3);
  BOOST_TEST(s.group.tp == 2);
  BOOST_TEST((s.group.devices == std::vector<int>{0, 1}));
  BOOST_TEST((s.group.queue == std::vector<uint64_t>{7}));
  BOOST_TEST(!s.group.draining);
  BOOST_REQUIRE_EQUAL(s.active.size(), 1u);
  BOOST_REQUIRE_EQUAL(s.queued.size(), 1u);
  BOOST_TEST(same(s.active[0], want));
  BOOST_TEST(same(s.queued[0], vf));
  BOOST_TEST(s.kv_free_tokens == 100.0 - 20.0);
  BOOST_TEST(s.tau_cap == 0.8);
}

BOOST_AUTO_TEST_CASE(deadline_steps_the_urgent_request_first_static_does_not) {
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  auto make = [&] {
    pol::group_snapshot g;
    g.now_s = 1.0;
    g.group.tp = 1;
    for (uint64_t i = 1; i <= 4; ++i) g.active.push_back(dls::test::fresh_request(i, 0.1 * i, 1000.0));
    g.active.push_back(dls::test::fresh_request(9, 0.9, 1.5));  // arrived last, due first
    return g;
  };
  auto g = make();
  auto d = pol::decide_step(g, policy_named("deadline"), &m, q);
  BOOST_TEST((d.batch == std::vector<uint64_t>{9}));
  g = make();
  d = pol::decide_step(g, policy_named("static"), &m, q);
  BOOST_TEST((d.batch == std::vector<uint64_t>{1}));
}

// The two pieces of a group decision the simulator calls too: the step estimate stretches
// when more requests are active than a step takes, and an idle group admits its first queued
// request even where KV room (or admission control) would have it wait.
BOOST_AUTO_TEST_CASE(a_group_decision_stretches_its_step_and_never_idles_with_work_queued) {
  const auto m = dls::test::small_cost();
  pol::group_load eight, sixteen;
  for (int i = 0; i < 8; ++i) eight.add(20);
  for (int i = 0; i < 16; ++i) sixteen.add(20);
  const double one = pol::expected_step_s(m, 1, eight, 8, 4.0, 8192);
  BOOST_TEST(pol::held_step_s(m, 1, eight, 8, 4.0, 8192, 8) == one);
  BOOST_TEST(pol::held_step_s(m, 1, sixteen, 8, 4.0, 8192, 8) == 2 * one, boost::test_tools::tolerance(1e-12));
  // The marginal costs' reference: a full batch of the held requests' mean canvas, or of one
  // block when the group holds none.
  const auto ref = pol::group_reference_batch(sixteen.sum_canvas, sixteen.requests, 8, 8192, 4.0);
  BOOST_TEST(ref.requests == pol::saturated_batch(20, 8, 8192, 4.0).requests);
  BOOST_TEST(ref.key_rows == pol::saturated_batch(20, 8, 8192, 4.0).key_rows);
  BOOST_TEST(pol::group_reference_batch(0, 0, 8, 8192, 4.0).key_rows == pol::saturated_batch(8, 8, 8192, 4.0).key_rows);

  const auto q = dls::test::small_quality();
  const auto sched = policy_named("deadline").sched;
  std::vector<pol::request_view> queued{dls::test::fresh_request(1, 0.1, 10.0), dls::test::fresh_request(2, 0.2, 10.0)};
  pol::admission_room room;
  room.slots = 4;
  room.kv_tokens = 5;  // less than one canvas
  BOOST_TEST(pol::admit(queued, room, 1.0, sched, q, 1e-3, &m, 1, nullptr).empty());
  BOOST_TEST((pol::admit_to_group(queued, room, 1.0, sched, q, 1e-3, &m, 1, {}) == std::vector<int>{0}));
  const std::vector<pol::request_view> busy{dls::test::fresh_request(7, 0.0, 10.0)};
  BOOST_TEST(pol::admit_to_group(queued, room, 1.0, sched, q, 1e-3, &m, 1, busy).empty());
}

BOOST_AUTO_TEST_CASE(tau_falls_under_load_but_never_for_a_pinned_request_nor_below_a_floor) {
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  pol::group_snapshot g;
  g.now_s = 0.0;
  g.group.tp = 1;
  // Sixteen requests, each 16 steps at tau 0.9 but due in 25 ms: only tau 0.75 makes it.
  for (uint64_t i = 1; i <= 16; ++i) g.queued.push_back(dls::test::fresh_request(i, 0.0, 0.025));
  g.queued[0].tau_pinned = true;
  g.queued[1].tau_floor = 0.8;
  auto d = pol::decide_step(g, policy_named("dilaserve", 8), &m, q);
  BOOST_TEST(d.admitted.size() + g.queued.size() == 16u);
  BOOST_TEST(g.active.size() == d.admitted.size());
  auto every = g.active;
  every.insert(every.end(), g.queued.begin(), g.queued.end());
  for (const auto& r : every) {
    if (r.id == 1)
      BOOST_TEST(r.tau == 0.9);
    else if (r.id == 2)
      BOOST_TEST(r.tau == 0.8);
    else
      BOOST_TEST(r.tau < 0.8);
  }
  // Alone with time to spare, tau returns to the reference.
  pol::group_snapshot lone;
  lone.group.tp = 1;
  lone.active.push_back(dls::test::fresh_request(20, 0.0, 10.0));
  lone.active[0].tau = 0.7;
  pol::decide_step(lone, policy_named("dilaserve", 8), &m, q);
  BOOST_TEST(lone.active[0].tau == 0.9);
  // Static never moves tau off the reference, except for a pinned one.
  pol::group_snapshot st;
  st.group.tp = 1;
  st.active.push_back(dls::test::fresh_request(21, 0.0, 0.01));
  st.active.push_back(dls::test::fresh_request(22, 0.0, 0.01));
  st.active[1].tau = 0.5;
  st.active[1].tau_pinned = true;
  pol::decide_step(st, policy_named("static", 8), &m, q);
  BOOST_TEST(st.active[0].tau == 0.9);
  BOOST_TEST(st.active[1].tau == 0.5);
}

BOOST_AUTO_TEST_CASE(a_request_whose_rule_does_not_read_tau_keeps_it_under_load) {
  // A request's own commit rule (or the cluster's) other than threshold commits what it commits
  // whatever tau says: its group holds its tau as if the client had pinned it, so tau control
  // neither lowers it nor charges the accuracy budget for it.
  const auto q = dls::test::small_quality();
  const auto m = dls::test::small_cost();
  auto canvas_of = [](dls::gpu::commit_rule rule) {
    dls::gpu::decode_params p;
    p.gen_length = 16;
    p.block_length = 8;
    p.rule = rule;
    return dls::gpu::canvas::start({5, 6, 7, 8}, p, mask, eos);
  };
  rt::work_item item;  // the client pinned nothing
  for (auto rule : {dls::gpu::commit_rule::quota, dls::gpu::commit_rule::factor, dls::gpu::commit_rule::margin,
                    dls::gpu::commit_rule::entropy, dls::gpu::commit_rule::origin})
    BOOST_TEST(act::tau_held(item, act::progress_of(canvas_of(rule))), dls::gpu::to_string(rule));
  const auto by_tau = act::progress_of(canvas_of(dls::gpu::commit_rule::threshold));
  BOOST_TEST(!act::tau_held(item, by_tau));
  item.threshold_pinned = true;
  BOOST_TEST(act::tau_held(item, by_tau));

  // Sixteen requests due in 25 ms, as the group holds them; request 1 commits by quota. With
  // credit to spend, tau falls for every other one.
  item.threshold_pinned = false;
  std::vector<act::live_request> live(16);
  std::vector<const act::live_request*> queued;
  for (std::size_t i = 0; i < live.size(); ++i) {
    auto& lr = live[i];
    lr.id = i + 1;
    lr.deadline_s = 0.025;
    lr.progress = i == 0 ? act::progress_of(canvas_of(dls::gpu::commit_rule::quota)) : by_tau;
    lr.tau_pinned = act::tau_held(item, lr.progress);
    queued.push_back(&lr);
  }
  act::live_group lg;
  auto g = act::snapshot_of(lg, 0.0, {}, queued);
  auto p = policy_named("dilaserve", 8);
  p.thr.accuracy_budget = 0.01;
  pol::accuracy_ledger ledger;
  ledger.budget = 0.01;
  ledger.tau_ref = 0.9;
  for (const auto& r : g.queued) ledger.enter(r, q);
  for (int i = 0; i < 1000; ++i) ledger.finish();
  g.ledger = &ledger;
  pol::decide_step(g, p, &m, q);
  int lowered = 0;
  for (const auto& list : {g.active, g.queued})
    for (const auto& r : list) {
      if (r.id == 1)
        BOOST_TEST(r.tau == 0.9);
      else
        lowered += r.tau < 0.9 ? 1 : 0;
    }
  BOOST_TEST(lowered == 15);
}

BOOST_AUTO_TEST_CASE(the_cap_comes_down_when_the_groups_arrivals_outrun_its_capacity) {
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  // A lone request with ten seconds to spare keeps the reference tau...
  auto lone = [] {
    pol::group_snapshot g;
    g.group.tp = 1;
    g.now_s = 2.0;
    g.active.push_back(dls::test::fresh_request(1, 2.0, 12.0));
    return g;
  };
  auto g = lone();
  BOOST_TEST(pol::decide_step(g, policy_named("dilaserve", 8), &m, q).tau_cap == 0.9);
  // ... until the group has seen 1,000 arrivals a second (10-s SLO windows: never due before
  // it). Each costs 0.1 ms of group time per step (the profile's per-request term) over 16
  // steps at 0.9, 1.6 s of work per second; at 0.8 (2 tokens a step) 0.8 s: the cap is the
  // highest level the group keeps up at.
  pol::load_forecast lf;
  lf.cfg.window_s = 2.0;
  for (int i = 1; i <= 2000; ++i) lf.record({i * 1e-3, 4, 16, 10.0});
  BOOST_TEST(1000 * 2 * q.steps_for(8, 0.85) * 1e-4 > 1.0);  // 0.85 does not keep up either
  g = lone();
  g.load = &lf;
  const auto d = pol::decide_step(g, policy_named("dilaserve", 8), &m, q);
  BOOST_TEST(d.tau_cap == 0.8);
  BOOST_TEST(g.active[0].tau == 0.8);
  // Static has no tau control, whatever the forecast says.
  g = lone();
  g.load = &lf;
  BOOST_TEST(pol::decide_step(g, policy_named("static", 8), &m, q).tau_cap == 0.9);
}

BOOST_AUTO_TEST_CASE(the_groups_accuracy_budget_limits_how_far_tau_falls) {
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  auto overloaded = [] {
    pol::group_snapshot g;
    g.group.tp = 1;
    for (uint64_t i = 1; i <= 16; ++i) g.queued.push_back(dls::test::fresh_request(i, 0.0, 0.025));
    return g;
  };
  auto p = policy_named("dilaserve", 8);
  p.thr.accuracy_budget = 0.01;
  // No request has finished yet, so the budget has earned nothing: tau stays at the reference.
  pol::accuracy_ledger ledger;
  ledger.budget = 0.01;
  ledger.tau_ref = 0.9;
  auto g = overloaded();
  for (const auto& r : g.queued) ledger.enter(r, q);
  g.ledger = &ledger;
  pol::decide_step(g, p, &m, q);
  for (const auto& list : {g.active, g.queued})
    for (const auto& r : list) BOOST_TEST(r.tau == 0.9);
  // After 20 finished requests the credit is 20 x 0.01 = 0.2 of summed loss, less than the
  // 16 x 0.15 that tau 0.7 for all would cost: tau falls for some, within the credit.
  for (int i = 0; i < 20; ++i) ledger.finish();
  g = overloaded();
  g.ledger = &ledger;
  pol::decide_step(g, p, &m, q);
  int lowered = 0;
  for (const auto& list : {g.active, g.queued})
    for (const auto& r : list) lowered += r.tau < 0.9 ? 1 : 0;
  BOOST_TEST(lowered > 0);
  BOOST_TEST(ledger.credit() >= -1e-12);
}

// A decision a group records (DILASERVE_DECISION_LOG) reads back as it was written, to the bit,
// and decides as the original did: what `dilaserve bench-decisions` times is the live decision.
BOOST_AUTO_TEST_CASE(a_recorded_decision_reads_back_as_written_and_decides_the_same) {
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  act::decision_record rec;
  rec.group = "node0/g0";
  rec.policy = "dilaserve";
  rec.step_overhead_s = 1.0 / 3e4;
  auto& g = rec.snapshot;
  g.now_s = 10.0 / 3.0;
  g.group.tp = 1;
  g.tau_cap = 0.85;
  g.kv_free_tokens = 1e18;
  for (uint64_t i = 1; i <= 3; ++i) {
    auto r = dls::test::fresh_request(i, 3.0 + i / 7.0, 3.34 + i / 300.0);
    r.blocks_done = 1;
    r.steps_in_block = 1;
    r.masks_left_in_block = 5;
    r.next_kind = pol::step_kind::reuse;
    r.tau_low = 0.8;
    r.group = 0;
    g.active.push_back(r);
  }
  g.active[1].tau_pinned = true;
  g.active[1].tau = 0.75;
  for (uint64_t i = 4; i <= 12; ++i) g.queued.push_back(dls::test::fresh_request(i, 3.2 + i / 11.0, 3.3 + i / 90.0));
  g.queued[2].tau_floor = 0.8;
  g.queued[3].reject_on_miss = true;
  g.fresh = {11, 12};
  rec.ledger.budget = 0.01;
  rec.ledger.tau_ref = 0.9;
  rec.ledger.earned = 0.37;
  rec.ledger.spent = 0.1 / 3.0;
  rec.ledger.reserved = 0.02;
  rec.ledger.finished = 37;
  for (int i = 0; i < 20; ++i) rec.arrivals.push_back({2.0 + i / 13.0, 4 + i % 3, 16, 0.03 + i / 1e4});

  const auto back = act::decision_record_from_json(act::to_json_line(rec));
  BOOST_TEST(back.group == rec.group);
  BOOST_TEST(back.policy == rec.policy);
  BOOST_TEST(back.step_overhead_s == rec.step_overhead_s);
  BOOST_TEST(back.snapshot.now_s == g.now_s);
  BOOST_TEST(back.snapshot.tau_cap == g.tau_cap);
  BOOST_TEST(back.snapshot.kv_free_tokens == g.kv_free_tokens);
  BOOST_TEST((back.snapshot.fresh == g.fresh));
  BOOST_TEST(back.ledger.spent == rec.ledger.spent);
  BOOST_TEST(back.ledger.finished == rec.ledger.finished);
  BOOST_TEST_REQUIRE(back.arrivals.size() == rec.arrivals.size());
  BOOST_TEST(back.arrivals[7].t_s == rec.arrivals[7].t_s);
  BOOST_TEST(back.arrivals[7].window_s == rec.arrivals[7].window_s);
  BOOST_TEST_REQUIRE(back.snapshot.active.size() == g.active.size());
  BOOST_TEST_REQUIRE(back.snapshot.queued.size() == g.queued.size());
  auto same = [](const pol::request_view& a, const pol::request_view& b) {
    return a.id == b.id && a.arrival_s == b.arrival_s && a.deadline_s == b.deadline_s && a.tau == b.tau &&
           a.tau_low == b.tau_low && a.tau_pinned == b.tau_pinned && a.tau_floor == b.tau_floor &&
           a.reject_on_miss == b.reject_on_miss && a.prompt_len == b.prompt_len && a.gen_len == b.gen_len &&
           a.block_len == b.block_len && a.blocks_done == b.blocks_done && a.steps_in_block == b.steps_in_block &&
           a.masks_left_in_block == b.masks_left_in_block && a.next_kind == b.next_kind &&
           a.refresh_done == b.refresh_done && a.group == b.group;
  };
  for (std::size_t i = 0; i < g.active.size(); ++i) BOOST_TEST(same(back.snapshot.active[i], g.active[i]));
  for (std::size_t i = 0; i < g.queued.size(); ++i) BOOST_TEST(same(back.snapshot.queued[i], g.queued[i]));

  auto p = policy_named("dilaserve", 8);
  p.thr.accuracy_budget = 0.01;
  auto decide = [&](const act::decision_record& r) {
    auto snap = r.snapshot;
    auto ledger = r.ledger;
    pol::load_forecast lf;
    for (const auto& a : r.arrivals) lf.record(a);
    snap.ledger = &ledger;
    snap.load = &lf;
    auto d = pol::decide_step(snap, p, &m, q);
    std::vector<double> taus;
    for (const auto* list : {&snap.active, &snap.queued})
      for (const auto& v : *list) taus.push_back(v.tau);
    return std::make_tuple(d.batch, d.admitted, d.tau_cap, taus, ledger.reserved);
  };
  BOOST_TEST((decide(back) == decide(rec)));
}

BOOST_AUTO_TEST_CASE(a_bad_decision_record_is_refused_naming_the_field) {
  act::decision_record rec;
  rec.group = "node0/g0";
  rec.policy = "static";
  rec.snapshot.queued.push_back(dls::test::fresh_request(1, 0.0, 0.1));
  const auto good = act::to_json_line(rec);
  auto refused = [](const std::string& line) {
    try {
      act::decision_record_from_json(line);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  BOOST_TEST(refused("{\"group\": ").find("not JSON") == 0u);
  auto without_tau = good;
  without_tau.replace(without_tau.find("\"tau\":"), 6, "\"tux\":");
  BOOST_TEST(refused(without_tau) == "snapshot.queued[0].tau is missing");
  auto negative = good;
  negative.replace(negative.find("\"prompt_len\":4"), 14, "\"prompt_len\":-4");
  BOOST_TEST(refused(negative).find("snapshot.queued[0].prompt_len is not an integer") == 0u);
  BOOST_TEST(refused("[1, 2]") == "record is not an object");
}

BOOST_AUTO_TEST_CASE(a_draining_group_admits_nothing_and_holds_requests_at_their_boundary) {
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  pol::group_snapshot g;
  g.group.tp = 1;
  g.group.draining = true;
  g.active.push_back(dls::test::fresh_request(1, 0, 10));                 // next step is a refresh: waits
  g.active.push_back(dls::test::fresh_request(2, 0, 10));
  g.active[1].steps_in_block = 1;
  g.active[1].masks_left_in_block = 4;
  g.active[1].next_kind = pol::step_kind::reuse;       // inside a block: steps on
  g.queued.push_back(dls::test::fresh_request(3, 0, 10));
  const auto d = pol::decide_step(g, policy_named("dilaserve", 8), &m, q);
  BOOST_TEST(d.admitted.empty());
  BOOST_TEST((d.batch == std::vector<uint64_t>{2}));
  BOOST_TEST((d.batch_index == std::vector<std::size_t>{1}));  // where it is in the active list
}

BOOST_AUTO_TEST_CASE(measured_overhead_joins_the_profile_and_the_deadline_definition) {
  const auto m = dls::test::small_cost();
  const auto q = dls::test::small_quality();
  pol::batch_totals one;
  one.add(pol::step_item_of(pol::step_kind::reuse, 20, 8));
  const auto with = pol::with_step_overhead(m, 1, 0.002);
  BOOST_TEST(with.step_seconds(1, one) == m.step_seconds(1, one) + 0.002, boost::test_tools::tolerance(1e-12));
  // Solo at tau 0.9 (one token per step): 2 blocks x 8 steps of 1.1 ms; due at arrival + 2 x that.
  const double solo = 16 * 1.1e-3;
  BOOST_TEST(pol::slo_deadline_s(5.0, 2.0, m, q, 4, 16, 8, 0.9) == 5.0 + 2 * solo, boost::test_tools::tolerance(1e-9));
  // The path outside the engine that a lone request also takes counts at the same scale.
  BOOST_TEST(pol::slo_deadline_s(5.0, 2.0, m, q, 4, 16, 8, 0.9, 0.003) == 5.0 + 2 * (solo + 0.003),
             boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(a_group_size_keeps_the_first_idle_figure_for_every_later_group) {
  // Two TP-1 groups start together and time 0.1 and 0.3 ms: both take the first figure
  // offered; a TP-1 group formed later by a regroup, on a busy node, finds it and never uses
  // its own 2 ms; a first TP-2 group sets its size's figure.
  dls::actors::slo_overhead_book book;
  BOOST_TEST(!book.find(1).has_value());
  BOOST_TEST(book.offer(1, 0.0001) == 0.0001);
  BOOST_TEST(book.offer(1, 0.0003) == 0.0001);
  BOOST_TEST(book.find(1).value() == 0.0001);
  BOOST_TEST(!book.find(2).has_value());
  BOOST_TEST(book.offer(2, 0.0004) == 0.0004);
  BOOST_TEST(book.offer(1, 0.002) == 0.0001);
  BOOST_TEST(book.find(2).value() == 0.0004);
}

BOOST_AUTO_TEST_CASE(the_forecast_sees_a_burst_as_a_burst_and_keeps_the_mix_when_idle) {
  std::vector<pol::arrival_record> a;
  for (int i = 0; i < 40; ++i) a.push_back({9.05 + 0.01 * i, 16, 48});  // 40 in the last second
  a.push_back({9.9, 16, 16});
  pol::forecast_config cfg;
  cfg.window_s = 4.0;
  cfg.subwindow_s = 1.0;  // four sub-windows of one second
  cfg.block_len = 8;
  cfg.max_classes = 4;
  auto f = pol::forecast_from_arrivals(a, 10.0, cfg);
  BOOST_TEST(f.arrival_rate == 41.0);        // the busiest second, not the mean
  BOOST_TEST(f.mean_rate == 41.0 / 4.0);
  // Four classes of canvas length, shortest first: the one 32-token canvas shares the first
  // class with nine 64-token ones (mean answer 44.8 tokens: 6 blocks of 8).
  BOOST_REQUIRE_EQUAL(f.mix.size(), 4u);
  BOOST_TEST(f.mix[0].gen_len == 48);
  BOOST_TEST(f.mix[0].weight == 10.0 / 41.0, boost::test_tools::tolerance(1e-12));
  double total = 0;
  for (const auto& c : f.mix) total += c.weight;
  BOOST_TEST(total == 1.0, boost::test_tools::tolerance(1e-12));
  // Long after: no rate, the same mix.
  f = pol::forecast_from_arrivals(a, 100.0, cfg);
  BOOST_TEST(f.arrival_rate == 0.0);
  BOOST_TEST(f.mix.size() == 4u);
  // The mix comes from the latest arrivals only.
  cfg.max_mix_arrivals = 1;
  f = pol::forecast_from_arrivals(a, 10.0, cfg);
  BOOST_REQUIRE_EQUAL(f.mix.size(), 1u);
  BOOST_TEST(f.mix[0].gen_len == 16);
  BOOST_TEST(pol::forecast_from_arrivals({}, 1.0, cfg).mix.empty());
}

BOOST_AUTO_TEST_CASE(a_provisioning_forecast_takes_the_whole_history) {
  // Ten quiet seconds (one arrival a second), then a second of 30: the burst quantile over the
  // whole span sees the busy second, the mean rate is the span's, and the mix holds every
  // arrival, the first included, however many there are.
  std::vector<pol::arrival_record> h;
  for (int i = 0; i < 10; ++i) h.push_back({static_cast<double>(i), 100, 8});
  for (int i = 0; i < 30; ++i) h.push_back({10.0 + i / 30.0, 400, 40});
  pol::forecast_config cfg;
  cfg.subwindow_s = 1.0;
  cfg.quantile = 0.95;
  cfg.block_len = 8;
  cfg.max_classes = 40;
  cfg.max_mix_arrivals = 5;  // a running forecast's limit; the provisioning one takes them all
  const auto f = pol::provisioning_forecast(h, cfg);
  const double span = 10.0 + 29.0 / 30.0;
  BOOST_TEST(f.mean_rate == 40.0 / span, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(f.arrival_rate > 25.0);  // the busy second, not the mean of about 3.6 per second
  double weight = 0, short_weight = 0;
  for (const auto& c : f.mix) {
    weight += c.weight;
    if (c.prompt_len == 100) short_weight += c.weight;
  }
  BOOST_TEST(weight == 1.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(short_weight == 10.0 / 40.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(pol::provisioning_forecast({}, cfg).mix.empty());
}

BOOST_AUTO_TEST_CASE(the_emptiest_changing_nodes_drain_first) {
  // Nodes 0-4: changes and may (12 held), unchanged (0), changes but within its dwell (0),
  // changes and may (3), changes and may (3: the tie goes to the earlier node).
  std::vector<pol::drain_candidate> n{{true, true, 12}, {false, true, 0}, {true, false, 0}, {true, true, 3}, {true, true, 3}};
  BOOST_TEST(pol::nodes_to_drain(n, 1) == std::vector<int>({3}), boost::test_tools::per_element());
  BOOST_TEST(pol::nodes_to_drain(n, 2) == std::vector<int>({3, 4}), boost::test_tools::per_element());
  BOOST_TEST(pol::nodes_to_drain(n, 10) == std::vector<int>({3, 4, 0}), boost::test_tools::per_element());
  BOOST_TEST(pol::nodes_to_drain(n, 0).empty());
  // How many drain at once: reconfigure.max_fraction of the nodes, at least one.
  BOOST_TEST(pol::nodes_at_once(0.25, 2) == 1);
  BOOST_TEST(pol::nodes_at_once(0.25, 8) == 2);
  BOOST_TEST(pol::nodes_at_once(1.0, 2) == 2);
  BOOST_TEST(pol::nodes_at_once(0.0, 5) == 1);
}

BOOST_AUTO_TEST_CASE(the_length_mix_is_equal_count_classes_in_whole_blocks) {
  std::vector<pol::request_shape> s;
  for (int i = 0; i < 6; ++i) s.push_back({100 + i, 8});   // short answers
  for (int i = 0; i < 6; ++i) s.push_back({1000, 40 + i});  // long ones, not whole blocks
  const auto mix = pol::length_mix(s, 2, 32);
  BOOST_REQUIRE_EQUAL(mix.size(), 2u);
  BOOST_TEST(mix[0].prompt_len == 103);  // mean of 100..105, rounded
  BOOST_TEST(mix[0].gen_len == 32);      // at least one block
  BOOST_TEST(mix[1].gen_len == 32);      // 42.5 tokens: one block of 32
  BOOST_TEST(mix[0].weight == 0.5);
  BOOST_TEST(pol::length_mix(s, 2, 8)[1].gen_len == 40);  // 42.5 / 8 = 5.3 blocks of 8
  BOOST_TEST(pol::length_mix(s, 50, 32).size() == 12u);   // never more classes than shapes
  BOOST_TEST(pol::length_mix({}, 4, 32).empty());
}

BOOST_AUTO_TEST_CASE(placement_balances_held_requests_per_device) {
  std::vector<pol::placement_view> gs{{2, 5, false}, {1, 3, false}, {1, 0, true}};
  BOOST_TEST(pol::placement_load(gs[0]) == 2.5);
  BOOST_TEST(pol::place_request(gs) == 0);  // 2.5 per device beats 3; the empty one drains
  gs[0].requests = 7;
  BOOST_TEST(pol::place_request(gs) == 1);  // 3.5 per device against 3
  gs[0].requests = 6;  // 3 per device each: the tie goes to the lower index
  BOOST_TEST(pol::place_request(gs) == 0);
  gs[0].draining = gs[1].draining = true;
  BOOST_TEST(pol::place_request(gs) == -1);
  BOOST_TEST(pol::place_request({}) == -1);
  // After a regroup onto TP 2 + TP 1 the TP-2 group takes two of every three.
  BOOST_TEST((pol::spread_requests(6, {2, 1}) == std::vector<int>{0, 1, 0, 0, 1, 0}));
  BOOST_TEST(pol::spread_requests(3, {}).empty());
}

namespace {

std::string config_with(const std::string& scheduler) {
  return "name: t\nauth: {token: abcdefghij}\nhead: {host: 127.0.0.1, port: 0}\n"
         "nodes: [{name: n0, devices: {kind: cpu, count: 1}}]\nmodel: {path: m}\n" + scheduler;
}

std::string error_of(const std::string& text) {
  try {
    rt::parse_cluster_config(text, "c.yaml", "/tmp");
  } catch (const rt::config_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_cluster_file_picks_the_policy_by_name_and_names_a_bad_one) {
  BOOST_TEST(rt::parse_cluster_config(config_with(""), "c.yaml", "/tmp").scheduler.policy == "static");
  BOOST_TEST(rt::parse_cluster_config(config_with("scheduler: dilaserve\n"), "c.yaml", "/tmp").scheduler.policy ==
             "dilaserve");
  const auto full = rt::parse_cluster_config(
      config_with("scheduler: {policy: deadline, slo_scale: 3, max_active: 16, tau_min: 0.6}\n"), "c.yaml", "/tmp");
  BOOST_TEST(full.scheduler.policy == "deadline");
  BOOST_TEST(full.scheduler.slo_scale == 3.0);
  BOOST_TEST(full.scheduler.max_active == 16);
  BOOST_TEST(full.scheduler.tau_min == 0.6);
  BOOST_TEST(full.scheduler.accuracy_budget == 0.01);
  BOOST_TEST(rt::parse_cluster_config(config_with("scheduler: {accuracy_budget: 0.005}\n"), "c.yaml", "/tmp")
                 .scheduler.accuracy_budget == 0.005);
  auto bad_budget = error_of(config_with("scheduler: {accuracy_budget: 2}\n"));
  BOOST_TEST(bad_budget.find("scheduler.accuracy_budget") != std::string::npos, bad_budget);

  auto bad_name = error_of(config_with("scheduler: fastest\n"));
  BOOST_TEST(bad_name.find("'fastest'") != std::string::npos, bad_name);
  BOOST_TEST(bad_name.find('\n') == std::string::npos);
  auto bad_knob = error_of(config_with("scheduler: {policy: static, tau_mn: 0.5}\n"));
  BOOST_TEST(bad_knob.find("unknown key 'tau_mn' in scheduler") != std::string::npos, bad_knob);
  auto bad_value = error_of(config_with("scheduler: {slo_scale: -1}\n"));
  BOOST_TEST(bad_value.find("scheduler.slo_scale") != std::string::npos, bad_value);
  // The path overhead deadlines count: measured at startup unless the file fixes it.
  BOOST_TEST(rt::parse_cluster_config(config_with(""), "c.yaml", "/tmp").scheduler.slo_request_overhead_ms < 0);
  BOOST_TEST(rt::parse_cluster_config(config_with("scheduler: {slo_request_overhead_ms: measure}\n"), "c.yaml", "/tmp")
                 .scheduler.slo_request_overhead_ms < 0);
  BOOST_TEST(rt::parse_cluster_config(config_with("scheduler: {slo_request_overhead_ms: 2.5}\n"), "c.yaml", "/tmp")
                 .scheduler.slo_request_overhead_ms == 2.5);
  for (const char* bad : {"-1", "often", "2e9"}) {
    auto e = error_of(config_with(std::string("scheduler: {slo_request_overhead_ms: ") + bad + "}\n"));
    BOOST_TEST(e.find("scheduler.slo_request_overhead_ms") != std::string::npos, e);
    BOOST_TEST(e.find('\n') == std::string::npos);
  }
  auto bad_tau = error_of(config_with("scheduler: {tau_min: 0.95}\n"));
  BOOST_TEST(bad_tau.find("scheduler.tau_min") != std::string::npos, bad_tau);
  BOOST_TEST(!rt::parse_cluster_config(config_with(""), "c.yaml", "/tmp").reconfigure.automatic);
  const auto rc = rt::parse_cluster_config(config_with("reconfigure: {mode: auto, interval_ms: 200}\n"), "c.yaml", "/tmp");
  BOOST_TEST(rc.reconfigure.automatic);
  BOOST_TEST(rc.reconfigure.interval_ms == 200);
  // The optimizer's group model is the cluster file's, as the simulator's is.
  const auto model = rt::parse_cluster_config(
      config_with("reconfigure: {mode: auto, utilization_max: 0.8, attainment_target: 0.95, capacity_units: 500}\n"),
      "c.yaml", "/tmp");
  BOOST_TEST(model.reconfigure.utilization_max == 0.8);
  BOOST_TEST(model.reconfigure.attainment_target == 0.95);
  BOOST_TEST(model.reconfigure.capacity_units == 500);
  auto bad_util = error_of(config_with("reconfigure: {mode: auto, utilization_max: 1.5}\n"));
  BOOST_TEST(bad_util.find("reconfigure.utilization_max") != std::string::npos, bad_util);
  BOOST_TEST(bad_util.find('\n') == std::string::npos);
  auto bad_mode = error_of(config_with("reconfigure: sometimes\n"));
  BOOST_TEST(bad_mode.find("'sometimes'") != std::string::npos, bad_mode);
  auto bad_rc_knob = error_of(config_with("reconfigure: {mode: auto, interval: 5}\n"));
  BOOST_TEST(bad_rc_knob.find("unknown key 'interval' in reconfigure") != std::string::npos, bad_rc_knob);
  auto bad_profile = error_of(config_with("scheduler: {profile: /nonexistent/p.yaml}\n"));
  BOOST_TEST(bad_profile.find("scheduler.profile") != std::string::npos, bad_profile);
  BOOST_TEST(bad_profile.find('\n') == std::string::npos);
}

// The migration planner's adapter: group reports (times relative to each group's now) become
// the summaries and views plan_migrations reads, and under the `migration` set's balance mode a
// backlog on one group moves to the idle one, queued requests (a canvas move) first.
BOOST_AUTO_TEST_CASE(migration_adapter_feeds_plan_migrations_what_the_groups_reported) {
  auto report = [](const std::string& group, const std::string& node, int requests) {
    rt::group_report g;
    g.group = group;
    g.node = node;
    g.tp = 1;
    g.step_s = 2e-3;
    g.kv_free_tokens = 1e6;
    g.max_active = 64;
    for (int i = 0; i < requests; ++i) {
      rt::request_report r;
      r.id = static_cast<uint64_t>(100 * (node == "n1") + i + 1);
      r.age_s = 0.5;
      r.to_deadline_s = 10.0;
      r.tau = 0.9;
      r.prompt_len = 4;
      r.gen_len = 16;
      r.block_len = 8;
      r.block = i < 4 ? 1 : 0;
      r.step_in_block = i < 4 ? 2 : 0;
      r.masks_left = i < 4 ? 5 : 8;
      r.next_refresh = i >= 4;
      r.active = i < 4;
      g.requests.push_back(r);
    }
    return g;
  };
  const auto q = dls::test::small_quality();
  auto in = act::migration_input_of({report("n0/g0", "n0", 12), report("n1/g0", "n1", 0)}, q);
  BOOST_REQUIRE_EQUAL(in.groups.size(), 2u);
  BOOST_TEST(in.names[0] == "n0/g0");
  BOOST_TEST(in.groups[0].id == 0);
  BOOST_TEST(in.groups[1].node == 1);
  BOOST_TEST(in.groups[0].load.requests == 12.0);
  BOOST_TEST(in.groups[0].active == 4);
  BOOST_TEST(!in.groups[0].at_risk);
  BOOST_REQUIRE_EQUAL(in.requests[0].size(), 12u);
  const auto& v = in.requests[0][0];
  BOOST_TEST(v.arrival_s == -0.5);
  BOOST_TEST(v.deadline_s == 10.0);
  BOOST_TEST(v.blocks_done == 1);
  BOOST_TEST(v.masks_left_in_block == 5);
  BOOST_TEST((v.next_kind == pol::step_kind::reuse));

  pol::migration_config cfg;
  cfg.mode = pol::make_policy_set("migration").migration;
  BOOST_TEST((cfg.mode == pol::migration_mode::balance));
  const auto m = dls::test::small_cost();
  auto moves = pol::plan_migrations(in.groups, in.request_lists(), 0.0, m, q, cfg, pol::link_params{});
  BOOST_REQUIRE(!moves.empty());
  for (const auto& mv : moves) {
    BOOST_TEST(mv.from == 0);
    BOOST_TEST(mv.to == 1);
  }
  for (const auto& mv : moves) BOOST_TEST(!mv.cost.kv_moved);  // 0.5 MiB per token: never cheaper here
  // static and deadline leave migration off.
  BOOST_TEST((pol::make_policy_set("static").migration == pol::migration_mode::none));
  BOOST_TEST((pol::make_policy_set("deadline").migration == pol::migration_mode::none));
  BOOST_TEST((pol::make_policy_set("dilaserve").migration == pol::migration_mode::deadline));

  // A request that misses at its group's step time marks the group at risk (deadline mode's trigger).
  auto late = report("n0/g0", "n0", 1);
  late.requests[0].to_deadline_s = 1e-3;
  BOOST_TEST(act::migration_input_of({late}, q).groups[0].at_risk);
}
