#define BOOST_TEST_MODULE gpu_decode
#include "test_support.hpp"

#include "gpu/cpu_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/kv_reshard.hpp"
#include "gpu/kv_wire.hpp"
#include "gpu/layer_segments.hpp"
#include "gpu/tp_runner.hpp"

#include <boost/test/unit_test.hpp>

#include <cmath>

using namespace dls::gpu;

namespace {

std::shared_ptr<const model> small_model() {
  static auto m = make_random_model(test::small_config(), 11);
  return m;
}

std::vector<int32_t> prompt(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(2 + (i * 7 + salt * 3) % 38);
  return p;
}

decode_params params(commit_rule rule, cache_mode cache, int gen = 16, int block = 8) {
  decode_params p;
  p.rule = rule;
  p.cache = cache;
  p.gen_length = gen;
  p.block_length = block;
  p.threshold = 0.1;  // the random model is unconfident; let the rule commit several tokens
  return p;
}

canvas run(engine& e, canvas c) {
  auto s = e.admit(std::move(c));
  while (!s.c.finished) e.step({&s});
  return s.c;
}

}  // namespace

BOOST_AUTO_TEST_CASE(one_token_per_step_commits_exactly_one) {
  engine e(make_cpu_backend(small_model()));
  auto s = e.admit(canvas::start(prompt(6, 1), params(commit_rule::quota, cache_mode::dual), 1, 0));
  while (!s.c.finished) {
    auto r = e.step({&s})[0];
    BOOST_TEST(r.committed == 1);
  }
  BOOST_TEST(s.c.steps == s.c.committed);
}

BOOST_AUTO_TEST_CASE(dual_cache_refreshed_every_step_equals_no_cache) {
  engine e(make_cpu_backend(small_model()));
  for (auto rule : {commit_rule::quota, commit_rule::threshold, commit_rule::factor}) {
    auto pn = params(rule, cache_mode::none, 24, 8);
    auto pd = params(rule, cache_mode::dual, 24, 8);
    pd.refresh_interval = 1;
    auto a = run(e, canvas::start(prompt(9, 2), pn, 1, 0));
    auto b = run(e, canvas::start(prompt(9, 2), pd, 1, 0));
    BOOST_TEST((a.ids == b.ids));
    BOOST_TEST(a.steps == b.steps);
  }
}

BOOST_AUTO_TEST_CASE(reuse_steps_compute_fewer_rows_but_report_them) {
  engine e(make_cpu_backend(small_model()));
  auto s = e.admit(canvas::start(prompt(20, 3), params(commit_rule::quota, cache_mode::dual, 16, 8), 1, 0));
  auto r0 = e.step({&s})[0];
  auto r1 = e.step({&s})[0];
  BOOST_TEST((r0.kind == step_kind::refresh && r0.query_rows == 36 && r0.key_rows == 36));
  BOOST_TEST((r1.kind == step_kind::reuse && r1.query_rows == 8 && r1.key_rows == 36));
  BOOST_TEST(r1.seconds > 0.0);
}

BOOST_AUTO_TEST_CASE(serialized_mid_decode_canvas_resumes_identically) {
  for (auto cache : {cache_mode::none, cache_mode::prefix, cache_mode::dual}) {
    engine e(make_cpu_backend(small_model()));
    auto p = params(commit_rule::threshold, cache, 24, 8);
    auto whole = run(e, canvas::start(prompt(7, 4), p, 1, 0));
    // Stop at a refresh boundary (block 1 start) and mid-block; resume elsewhere.
    for (int stop_after : {1, 3}) {
      auto s = e.admit(canvas::start(prompt(7, 4), p, 1, 0));
      int steps = 0;
      while (!s.c.finished && (steps < stop_after || (stop_after == 1 && !s.c.at_refresh_boundary()))) {
        e.step({&s});
        ++steps;
      }
      auto bytes = s.c.to_bytes();
      auto kv = s.cache->export_bytes();
      engine other(make_cpu_backend(small_model()));
      auto t = other.admit(canvas::from_bytes(bytes));
      if (!t.c.at_refresh_boundary()) t.cache->import_bytes(kv);  // mid-block: the KV cache moves too
      while (!t.c.finished) other.step({&t});
      BOOST_TEST((t.c.ids == whole.ids));
      BOOST_TEST(t.c.steps == whole.steps);
    }
  }
}

// A canvas moved mid-block without its KV cache: the destination rebuilds the cache with one
// forward over the canvas the last refresh ran on, and decodes exactly the tokens the request
// would have decoded where it was. Rebuilding from the current canvas instead (a plain
// recompute) gives the cached rows a context the source never had: the tokens the block
// committed since its refresh. Both are run; only the first must match, the second's mismatches
// are counted (docs/runtime.md, "Migration").
BOOST_AUTO_TEST_CASE(mid_block_cache_rebuilt_from_the_last_refresh_resumes_identically) {
  int moves = 0, recompute_differs = 0;
  for (auto cache : {cache_mode::prefix, cache_mode::dual}) {
    for (int interval : {0, 3}) {
      for (int salt = 0; salt < 6; ++salt) {
        engine e(make_cpu_backend(small_model()));
        auto p = params(commit_rule::quota, cache, 24, 8);
        p.refresh_interval = interval;
        auto whole = run(e, canvas::start(prompt(7 + salt, salt), p, 1, 0));
        for (int stop_after : {2, 5, 10, 13}) {
          auto s = e.admit(canvas::start(prompt(7 + salt, salt), p, 1, 0));
          canvas last_refresh = s.c;
          for (int k = 0; k < stop_after && !s.c.finished; ++k) {
            if (s.c.at_refresh_boundary()) last_refresh = s.c;
            e.step({&s});
          }
          if (s.c.finished || s.c.at_refresh_boundary()) continue;
          ++moves;
          engine other(make_cpu_backend(small_model()));
          auto t = other.admit_rebuilt(canvas::from_bytes(s.c.to_bytes()), last_refresh);
          while (!t.c.finished) other.step({&t});
          BOOST_TEST((t.c.ids == whole.ids));
          BOOST_TEST(t.c.steps == whole.steps);
          // The plain recompute: the same forward over the current canvas.
          auto u = other.admit(canvas::from_bytes(s.c.to_bytes()));
          auto current = u.c;
          current.step_in_block = 0;  // plan it as a refresh of the canvas as it is now
          step_plan plan = current.next_step();
          plan.layer1 = other.device().layers();
          std::vector<std::vector<row_proposal>> unused;
          other.device().forward({{&current, plan, u.cache.get()}}, unused);
          while (!u.c.finished) other.step({&u});
          recompute_differs += u.c.ids != whole.ids;
        }
      }
    }
  }
  BOOST_TEST(moves > 40);
  BOOST_TEST_MESSAGE("mid-block moves: " << moves << "; a plain recompute changed the answer of "
                                         << recompute_differs);
  // The cache source must be a refresh point of the same block.
  engine e(make_cpu_backend(small_model()));
  auto p = params(commit_rule::quota, cache_mode::dual, 16, 8);
  auto s = e.admit(canvas::start(prompt(5, 1), p, 1, 0));
  auto start = s.c;
  e.step({&s});
  BOOST_CHECK_THROW(e.admit_rebuilt(start, start), std::invalid_argument);  // not mid-block
  BOOST_CHECK_THROW(e.admit_rebuilt(s.c, s.c), std::invalid_argument);      // not a refresh point
  auto other = canvas::start(prompt(6, 1), p, 1, 0);
  BOOST_CHECK_THROW(e.admit_rebuilt(s.c, other), std::invalid_argument);    // another canvas
  BOOST_CHECK_NO_THROW(e.admit_rebuilt(s.c, start));
}

BOOST_AUTO_TEST_CASE(batched_steps_with_mixed_kinds_and_lengths_equal_single_runs) {
  engine e(make_cpu_backend(small_model()));
  std::vector<request_slot> slots;
  std::vector<canvas> singles;
  int i = 0;
  for (auto cache : {cache_mode::none, cache_mode::prefix, cache_mode::dual, cache_mode::dual}) {
    auto p = params(i % 2 ? commit_rule::quota : commit_rule::threshold, cache, 8 + 8 * i, 8);
    auto c = canvas::start(prompt(5 + 3 * i, i), p, 1, 0);
    singles.push_back(run(e, c));
    slots.push_back(e.admit(c));
    ++i;
  }
  // Stagger: the first request starts alone so later steps mix refresh and reuse.
  e.step({&slots[0]});
  bool mixed = false;
  while (true) {
    std::vector<request_slot*> batch;
    for (auto& s : slots)
      if (!s.c.finished) batch.push_back(&s);
    if (batch.empty()) break;
    auto reps = e.step(batch);
    bool has_refresh = false, has_reuse = false;
    for (auto& r : reps) (r.kind == step_kind::refresh ? has_refresh : has_reuse) = true;
    mixed |= has_refresh && has_reuse;
  }
  BOOST_TEST(mixed);
  for (std::size_t k = 0; k < slots.size(); ++k) BOOST_TEST((slots[k].c.ids == singles[k].ids));
}

BOOST_AUTO_TEST_CASE(a_released_request_gives_back_its_cache_and_cannot_step_again) {
  auto m = small_model();
  engine one(make_cpu_backend(m));
  tp_runner two(m, 2);
  const auto p = params(commit_rule::threshold, cache_mode::dual);
  auto a = canvas::start(prompt(10, 1), p, 1, 0);
  auto b = canvas::start(prompt(12, 2), p, 1, 0);
  const auto alone = run(one, b);
  const auto ha = two.admit(a), hb = two.admit(b);
  two.step({ha, hb});  // both refresh, so both ranks hold a cache for each
  BOOST_REQUIRE(two.slot(0, ha).cache && two.slot(0, ha).cache->bytes() > 0);
  two.release(ha);
  for (int rank = 0; rank < 2; ++rank) BOOST_TEST(!two.slot(rank, ha).cache);
  BOOST_CHECK_THROW(two.step({ha}), std::out_of_range);
  BOOST_CHECK_THROW(two.release(hb + 1), std::out_of_range);
  // The other request decodes on as if the released one had never been there.
  while (!two.view(hb).finished) two.step({hb});
  BOOST_TEST((two.view(hb).ids == alone.ids));
}

BOOST_AUTO_TEST_CASE(tensor_parallel_two_equals_one) {
  auto m = small_model();
  engine one(make_cpu_backend(m));
  tp_runner two(m, 2);
  // Logits within 1e-4 on a refresh.
  auto c = canvas::start(prompt(10, 5), params(commit_rule::threshold, cache_mode::dual), 1, 0);
  auto cache1 = one.device().make_cache();
  auto l1 = one.device().logits(c, c.next_step(), *cache1);
  std::vector<float> l2;
  {
    // Both ranks must run together; rank 1 on a thread.
    auto cache_a = two.rank_engine(0).device().make_cache();
    auto cache_b = two.rank_engine(1).device().make_cache();
    std::thread t([&] { two.rank_engine(1).device().logits(c, c.next_step(), *cache_b); });
    l2 = two.rank_engine(0).device().logits(c, c.next_step(), *cache_a);
    t.join();
  }
  BOOST_REQUIRE_EQUAL(l1.size(), l2.size());
  float worst = 0;
  for (std::size_t i = 0; i < l1.size(); ++i) worst = std::max(worst, std::fabs(l1[i] - l2[i]));
  BOOST_TEST(worst < 1e-4f);
  // Token-identical decodes for each cache mode, batched.
  for (auto cache : {cache_mode::none, cache_mode::prefix, cache_mode::dual}) {
    auto p = params(commit_rule::threshold, cache, 16, 8);
    auto a = run(one, canvas::start(prompt(8, 6), p, 1, 0));
    auto b = run(one, canvas::start(prompt(12, 7), p, 1, 0));
    auto ha = two.admit(canvas::start(prompt(8, 6), p, 1, 0));
    auto hb = two.admit(canvas::start(prompt(12, 7), p, 1, 0));
    while (!two.view(ha).finished || !two.view(hb).finished) two.step({ha, hb});
    BOOST_TEST((two.view(ha).ids == a.ids));
    BOOST_TEST((two.view(hb).ids == b.ids));
    BOOST_TEST((two.view(1, hb).ids == b.ids));
  }
}

namespace {

// Five layers, so a refresh can be split in uneven ranges.
std::shared_ptr<const model> five_layer_model() {
  static auto m = [] {
    auto c = test::small_config();
    c.n_layers = 5;
    return make_random_model(c, 12);
  }();
  return m;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_split_refresh_commits_nothing_until_its_last_layer) {
  engine e(make_cpu_backend(five_layer_model()));
  // One token per step, so the step after the refresh is a reuse step.
  auto s = e.admit(canvas::start(prompt(10, 8), params(commit_rule::quota, cache_mode::dual, 16, 8), 1, 0));
  const auto before = s.c.ids;
  auto r = e.step({&s}, {2});
  BOOST_TEST(r[0].partial);
  BOOST_TEST(r[0].layers == 2);
  BOOST_TEST(r[0].committed == 0);
  BOOST_TEST((r[0].kind == step_kind::refresh && r[0].query_rows == 26));
  BOOST_TEST((s.c.ids == before));
  BOOST_TEST(s.c.steps == 0);
  BOOST_TEST(s.c.refresh_layers_done == 2);
  r = e.step({&s}, {2});
  BOOST_TEST((r[0].partial && s.c.refresh_layers_done == 4));
  // The last range (a limit past the end runs only what is left) commits as a refresh.
  r = e.step({&s}, {7});
  BOOST_TEST(!r[0].partial);
  BOOST_TEST(r[0].layers == 1);
  BOOST_TEST(r[0].committed > 0);
  BOOST_TEST(s.c.refresh_steps == 1);
  BOOST_TEST(s.c.refresh_layers_done == 0);
  // A limit on a reuse step is ignored: reuse steps always run every layer.
  r = e.step({&s}, {1});
  BOOST_TEST((r[0].kind == step_kind::reuse && !r[0].partial && r[0].layers == 5));
  // Bad input is named, not run.
  BOOST_CHECK_THROW(e.step({&s}, {1, 2}), std::invalid_argument);
  BOOST_CHECK_THROW(e.step({&s}, {-1}), std::invalid_argument);
  auto cache = e.device().make_cache();
  auto plan = s.c.next_step();
  plan.layer0 = 1;
  BOOST_CHECK_THROW(e.device().logits(s.c, plan, *cache), std::invalid_argument);  // reuse, partial
}

BOOST_AUTO_TEST_CASE(split_refreshes_decode_the_same_tokens_as_whole_ones) {
  auto m = five_layer_model();
  engine e(make_cpu_backend(m));
  for (auto cache : {cache_mode::none, cache_mode::prefix, cache_mode::dual}) {
    // Four requests of mixed lengths; each step gives each one a different layer limit (0 =
    // whole), so steps mix whole refreshes, layer ranges starting at 0 and in the middle, and
    // reuse steps, and rows leave and rejoin the GEMMs from layer to layer.
    std::vector<request_slot> slots;
    std::vector<canvas> singles;
    for (int i = 0; i < 4; ++i) {
      auto p = params(i % 2 ? commit_rule::quota : commit_rule::threshold, cache, 8 + 8 * i, 8);
      auto c = canvas::start(prompt(5 + 3 * i, i + 20), p, 1, 0);
      singles.push_back(run(e, c));
      slots.push_back(e.admit(c));
    }
    int partial = 0, step = 0, mixed_ranges = 0;
    while (true) {
      std::vector<request_slot*> batch;
      std::vector<int> limits;
      for (std::size_t k = 0; k < slots.size(); ++k)
        if (!slots[k].c.finished) {
          batch.push_back(&slots[k]);
          limits.push_back(static_cast<int>((step + 2 * k) % 4));  // 0..3 layers
        }
      if (batch.empty()) break;
      auto reps = e.step(batch, limits);
      bool some_partial = false, some_whole = false;
      for (const auto& r : reps) {
        partial += r.partial;
        (r.partial ? some_partial : some_whole) = true;
      }
      mixed_ranges += some_partial && some_whole;
      ++step;
    }
    BOOST_TEST(partial > 0);
    BOOST_TEST(mixed_ranges > 0);
    for (std::size_t k = 0; k < slots.size(); ++k) {
      BOOST_TEST((slots[k].c.ids == singles[k].ids), "cache mode " << static_cast<int>(cache) << " request " << k);
      BOOST_TEST(slots[k].c.steps == singles[k].steps);
      BOOST_TEST(slots[k].c.refresh_steps == singles[k].refresh_steps);
    }
  }
  // Tensor parallel: both ranks run the same ranges and agree with one device.
  tp_runner two(m, 2);
  auto p = params(commit_rule::threshold, cache_mode::dual, 16, 8);
  auto a = run(e, canvas::start(prompt(9, 30), p, 1, 0));
  auto ha = two.admit(canvas::start(prompt(9, 30), p, 1, 0));
  auto hb = two.admit(canvas::start(prompt(6, 31), p, 1, 0));
  auto b = run(e, canvas::start(prompt(6, 31), p, 1, 0));
  while (!two.view(ha).finished || !two.view(hb).finished) two.step({ha, hb}, {2, 3});
  BOOST_TEST((two.view(ha).ids == a.ids));
  BOOST_TEST((two.view(1, hb).ids == b.ids));
}

BOOST_AUTO_TEST_CASE(layer_segments_cut_where_a_range_starts_or_ends) {
  // A reuse step (all 32 layers), a split refresh's first range, a middle one and its last.
  auto segs = plan_layer_segments({{0, 32}, {0, 5}, {5, 12}, {12, 32}}, 32);
  BOOST_REQUIRE_EQUAL(segs.size(), 3u);
  BOOST_TEST((segs[0].l0 == 0 && segs[0].l1 == 5 && segs[0].items == std::vector<std::size_t>{0, 1}));
  BOOST_TEST((segs[1].l0 == 5 && segs[1].l1 == 12 && segs[1].items == std::vector<std::size_t>{0, 2}));
  BOOST_TEST((segs[2].l0 == 12 && segs[2].l1 == 32 && segs[2].items == std::vector<std::size_t>{0, 3}));
  BOOST_TEST((!segs[0].all && !segs[1].all && !segs[2].all));
  // Overlapping ranges and a gap no item runs: [3, 4) is left out.
  segs = plan_layer_segments({{0, 3}, {1, 3}, {4, 6}}, 6);
  BOOST_REQUIRE_EQUAL(segs.size(), 3u);
  BOOST_TEST((segs[0].l0 == 0 && segs[0].l1 == 1 && segs[0].items == std::vector<std::size_t>{0}));
  BOOST_TEST((segs[1].l0 == 1 && segs[1].l1 == 3 && segs[1].items == std::vector<std::size_t>{0, 1}));
  BOOST_TEST((segs[2].l0 == 4 && segs[2].l1 == 6 && segs[2].items == std::vector<std::size_t>{2}));
  // Whole steps: one segment that every item runs.
  segs = plan_layer_segments({{0, 4}, {0, 4}}, 4);
  BOOST_REQUIRE_EQUAL(segs.size(), 1u);
  BOOST_TEST((segs[0].all && segs[0].l0 == 0 && segs[0].l1 == 4));
  BOOST_TEST(plan_layer_segments({}, 4).empty());
}

// A request that moves mid-block between TP degrees takes its KV cache along, re-sharded by
// heads: TP 2 -> TP 1 and TP 1 -> TP 2 both finish with the tokens of an unmoved run.
BOOST_AUTO_TEST_CASE(kv_cache_reshards_between_tp_degrees_mid_block) {
  auto m = small_model();
  const int head_dim = m->config.head_dim();
  const auto p = params(commit_rule::threshold, cache_mode::dual, 24, 8);
  const canvas start = canvas::start(prompt(9, 5), p, 1, 0);
  engine solo(make_cpu_backend(m));
  const canvas whole = run(solo, start);
  {  // TP 2 -> TP 1
    tp_runner two(m, 2);
    const auto h = two.admit(start);
    for (int i = 0; i < 3; ++i) two.step({h});
    BOOST_REQUIRE(!two.view(h).at_refresh_boundary());
    const std::string k0 = two.slot(0, h).cache->export_bytes(), k1 = two.slot(1, h).cache->export_bytes();
    auto joined = reshard_kv({k0, k1}, 1, head_dim);
    BOOST_REQUIRE(joined.size() == 1u);
    engine one(make_cpu_backend(m));
    auto t = one.admit(canvas::from_bytes(two.view(h).to_bytes()));
    t.cache->import_bytes(joined[0]);
    while (!t.c.finished) one.step({&t});
    BOOST_TEST((t.c.ids == whole.ids));
    BOOST_TEST(t.c.steps == whole.steps);
  }
  {  // TP 1 -> TP 2
    engine one(make_cpu_backend(m));
    auto s = one.admit(start);
    for (int i = 0; i < 3; ++i) one.step({&s});
    BOOST_REQUIRE(!s.c.at_refresh_boundary());
    const std::string kv = s.cache->export_bytes();
    auto parts = reshard_kv({kv}, 2, head_dim);
    BOOST_REQUIRE(parts.size() == 2u);
    tp_runner two(m, 2);
    const auto h = two.admit(canvas::from_bytes(s.c.to_bytes()));
    for (int r = 0; r < 2; ++r) two.slot(r, h).cache->import_bytes(parts[static_cast<std::size_t>(r)]);
    while (!two.view(h).finished) two.step({h});
    BOOST_TEST((two.view(h).ids == whole.ids));
    BOOST_TEST(two.view(h).steps == whole.steps);
    // Joining the halves again gives back the TP 1 bytes exactly.
    BOOST_TEST(reshard_kv({parts[0], parts[1]}, 1, head_dim)[0] == kv);
  }
  BOOST_CHECK_THROW(reshard_kv({std::string_view(kv_wire_buffer({2, 3, head_dim * 3}))}, 2, head_dim),
                    std::invalid_argument);
}
