#define BOOST_TEST_MODULE gpu_canvas
#include "gpu/canvas.hpp"
#include "gpu/commit.hpp"
#include "gpu/kv_wire.hpp"

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <limits>
#include <stdexcept>

using namespace dls::gpu;

namespace {

std::vector<row_proposal> props(std::vector<double> conf, int first_pos = 10) {
  std::vector<row_proposal> v;
  for (std::size_t i = 0; i < conf.size(); ++i) v.push_back({first_pos + int(i), 100 + int(i), conf[i]});
  return v;
}

}  // namespace

BOOST_AUTO_TEST_CASE(threshold_commits_all_above_tau_and_always_the_top1) {
  auto p = props({0.95, 0.4, 0.91, 0.9});
  auto c = select_commits(p, commit_rule::threshold, 0.9, 0, 1.0);
  BOOST_TEST((c == std::vector<int32_t>{10, 12, 13}));  // >= tau, most confident first
  c = select_commits(props({0.3, 0.5, 0.5}), commit_rule::threshold, 0.9, 0, 1.0);
  BOOST_TEST((c == std::vector<int32_t>{11}));  // none clears tau: top-1, lower position on ties
}

BOOST_AUTO_TEST_CASE(quota_and_factor_rules) {
  auto p = props({0.2, 0.9, 0.6, 0.8});
  BOOST_TEST((select_commits(p, commit_rule::quota, 0.0, 2, 1.0) == std::vector<int32_t>{11, 13}));
  // factor f=1: rank i needs c >= 1 - 1/(i+1): 0.5, 0.667, 0.75, ... so 0.7 at rank 3 stops it.
  auto f = select_commits(props({0.99, 0.7, 0.76, 0.2}), commit_rule::factor, 0.0, 0, 1.0);
  BOOST_TEST((f == std::vector<int32_t>{10, 12}));
  BOOST_TEST((select_commits(props({0.99, 0.8, 0.9}), commit_rule::factor, 0.0, 0, 1.0) == std::vector<int32_t>{10, 12, 11}));
  BOOST_TEST(select_commits(props({0.1}), commit_rule::factor, 0.0, 0, 1.0).size() == 1u);
  // LLaDA's schedule: 8 masks over 3 steps -> 3, 3, 2.
  BOOST_TEST(quota_for_step(8, 3, 0) == 3);
  BOOST_TEST(quota_for_step(8, 3, 1) == 3);
  BOOST_TEST(quota_for_step(8, 3, 2) == 2);
  BOOST_TEST(quota_for_step(3, 8, 5) == 1);
}

BOOST_AUTO_TEST_CASE(plans_follow_the_cache_mode) {
  decode_params p;
  p.gen_length = 16;
  p.block_length = 8;
  p.cache = cache_mode::dual;
  auto c = canvas::start({5, 6, 7, 8}, p, 1, 0);
  auto s = c.next_step();
  BOOST_TEST((s.kind == step_kind::refresh && s.q0 == 0 && s.q1 == 20 && s.block0 == 4 && s.block1 == 12));
  BOOST_TEST(c.at_refresh_boundary());
  c.apply({{4, 9, 0.99}, {5, 9, 0.1}});
  s = c.next_step();
  BOOST_TEST((s.kind == step_kind::reuse && s.q0 == 4 && s.q1 == 12 && s.key_rows == 20));
  BOOST_TEST(!c.at_refresh_boundary());
  c.params.cache = cache_mode::prefix;
  s = c.next_step();
  BOOST_TEST((s.q0 == 4 && s.q1 == 20));
  c.params.cache = cache_mode::dual;
  c.params.refresh_interval = 1;
  BOOST_TEST((c.next_step().kind == step_kind::refresh));
}

BOOST_AUTO_TEST_CASE(blocks_advance_and_eos_finishes) {
  decode_params p;
  p.gen_length = 8;
  p.block_length = 4;
  p.threshold = 0.5;
  auto c = canvas::start({5, 6}, p, 1, 0);
  c.apply({{2, 7, 0.9}, {3, 7, 0.9}, {4, 7, 0.9}, {5, 7, 0.9}});
  BOOST_TEST(c.block == 1);
  BOOST_TEST(c.step_in_block == 0);
  BOOST_TEST(!c.finished);
  c.apply({{6, 8, 0.9}, {7, 0, 0.9}, {8, 0, 0.9}, {9, 0, 0.9}});
  BOOST_TEST(c.finished);
  BOOST_TEST((c.answer() == std::vector<int32_t>{7, 7, 7, 7, 8}));
  BOOST_TEST(c.steps == 2);
  BOOST_TEST(c.tokens_per_step() == 4.0);
}

BOOST_AUTO_TEST_CASE(canvas_round_trips_and_corruption_is_named) {
  decode_params p;
  p.gen_length = 16;
  p.rule = commit_rule::factor;
  p.factor = 2.0;
  p.temperature = 0.7;
  p.seed = 99;
  auto c = canvas::start({3, 4, 5}, p, 1, 0);
  c.apply({{3, 9, 0.99}, {4, 9, 0.2}});
  c.set_threshold(0.42);
  auto bytes = c.to_bytes();
  auto d = canvas::from_bytes(bytes);
  BOOST_TEST(d.to_bytes() == bytes);
  BOOST_TEST((d.ids == c.ids));
  BOOST_TEST(d.params.threshold == 0.42);
  BOOST_TEST(d.steps == 1);
  BOOST_TEST(d.params.seed == 99u);
  BOOST_CHECK_THROW(canvas::from_bytes(bytes.substr(0, bytes.size() - 3)), std::invalid_argument);
  BOOST_CHECK_THROW(canvas::from_bytes(bytes.substr(0, 20)), std::invalid_argument);
  BOOST_CHECK_THROW(canvas::from_bytes("XXXX" + bytes.substr(4)), std::invalid_argument);
  try {
    canvas::from_bytes(bytes.substr(0, 20));
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("truncated at byte") != std::string::npos);
  }
}

// Found by fuzz_canvas: a canvas with no ids copied from a null pointer, and lengths near
// INT32_MAX overflowed the length check; both are now refused as inconsistent.
BOOST_AUTO_TEST_CASE(canvas_bytes_with_impossible_lengths_are_refused) {
  auto c = canvas::start({3, 4, 5}, decode_params{}, 1, 0);
  auto empty = c;
  empty.ids.clear();
  BOOST_CHECK_THROW(canvas::from_bytes(empty.to_bytes()), std::invalid_argument);
  auto huge = c;
  huge.prompt_len = std::numeric_limits<int32_t>::max();
  BOOST_CHECK_THROW(canvas::from_bytes(huge.to_bytes()), std::invalid_argument);
}

// Found by fuzz_canvas: a canvas claiming INT64_MAX steps overflowed the counter on its next
// step (undefined behaviour). Step counts no decode can reach are refused with one line, and
// so is a step within its block past the most a block takes.
BOOST_AUTO_TEST_CASE(canvas_bytes_with_impossible_step_counts_are_refused) {
  decode_params p;
  p.gen_length = 16;
  auto c = canvas::start({3, 4, 5}, p, 1, 0);
  c.apply({{3, 9, 0.99}, {4, 9, 0.95}});
  BOOST_TEST(canvas::from_bytes(c.to_bytes()).steps == 1);  // a real decode's counts load
  auto refused = [](canvas x, const std::string& why) {
    try {
      canvas::from_bytes(x.to_bytes());
      BOOST_ERROR("accepted: " << why);
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()).find("impossible step counts") != std::string::npos, e.what());
    }
  };
  auto at_max = c;
  at_max.steps = at_max.refresh_steps = std::numeric_limits<int64_t>::max();
  at_max.reuse_steps = 0;
  refused(at_max, "INT64_MAX steps");
  auto negative = c;
  negative.reuse_steps = -1;
  negative.steps = negative.refresh_steps - 1;
  refused(negative, "negative reuse steps");
  auto mismatch = c;
  mismatch.steps += 5;
  refused(mismatch, "steps not the sum of refresh and reuse steps");
  auto overcommitted = c;
  overcommitted.committed = p.gen_length + 1;
  refused(overcommitted, "more commits than the answer has tokens");
  // Found by CI's fuzz run right after: step_in_block = INT32_MAX overflowed the same way.
  auto past_block = c;
  past_block.step_in_block = std::numeric_limits<int32_t>::max();
  BOOST_CHECK_THROW(canvas::from_bytes(past_block.to_bytes()), std::invalid_argument);
  past_block.step_in_block = p.block_length;  // a block of 8 tokens ends within 8 steps
  BOOST_CHECK_THROW(canvas::from_bytes(past_block.to_bytes()), std::invalid_argument);
  past_block.step_in_block = p.block_length - 1;
  BOOST_TEST(canvas::from_bytes(past_block.to_bytes()).step_in_block == p.block_length - 1);
}

// The bounds never refuse a real decode's canvas: every rule and schedule, with more and fewer
// steps per block than tokens, saved and loaded after every step until it finishes.
BOOST_AUTO_TEST_CASE(every_canvas_of_a_real_decode_passes_the_bounds) {
  struct rule_case {
    commit_rule rule;
    int steps_per_block;
    step_schedule schedule;
    double threshold;
  };
  const rule_case cases[] = {{commit_rule::threshold, 0, step_schedule::even, 1.0},
                             {commit_rule::factor, 0, step_schedule::even, 0.9},
                             {commit_rule::quota, 3, step_schedule::even, 0.9},
                             {commit_rule::quota, 16, step_schedule::even, 0.9},
                             {commit_rule::entropy, 5, step_schedule::dream_linear, 0.9},
                             {commit_rule::margin, 12, step_schedule::dream_linear, 0.9},
                             {commit_rule::origin, 4, step_schedule::even, 0.9}};
  for (const auto& k : cases) {
    decode_params p;
    p.gen_length = 16;
    p.rule = k.rule;
    p.steps_per_block = k.steps_per_block;
    p.schedule = k.schedule;
    p.threshold = k.threshold;
    p.seed = 7;
    auto c = canvas::start({3, 4, 5}, p, 1, 0);
    for (int step = 0; !c.finished; ++step) {
      BOOST_REQUIRE(step < 1000);
      std::vector<row_proposal> props;
      for (int pos = c.block_begin(); pos < c.block_end(); ++pos)
        if (c.ids[static_cast<std::size_t>(pos)] == 1) props.push_back({pos, 9, 0.5 + 0.01 * pos});
      c.apply(props);
      try {
        c = canvas::from_bytes(c.to_bytes());
      } catch (const std::invalid_argument& e) {
        BOOST_FAIL("rule " << static_cast<int>(k.rule) << " spb " << k.steps_per_block << " step " << step << ": " << e.what());
      }
    }
  }
}

// Found by fuzz_kv_wire's review: dimensions whose product wraps around size_t matched a
// header-only buffer, so the importer was asked for 2^61 floats.
BOOST_AUTO_TEST_CASE(kv_wire_dimensions_must_match_the_buffer) {
  const kv_dims small{2, 3, 4};
  std::string ok = kv_wire_buffer(small);
  BOOST_TEST(parse_kv_wire(ok).count() == small.count());
  BOOST_CHECK_THROW(parse_kv_wire(ok.substr(0, ok.size() - 4)), std::invalid_argument);
  BOOST_TEST(parse_kv_wire(kv_wire_buffer({0, 5, 7})).count() == 0u);
  std::string wrapped = kv_wire_buffer({0, 0, 0});
  const int32_t dims[3] = {1 << 20, 1 << 20, 1 << 21};  // 2 * 2^61 floats * 4 bytes = 2^64
  std::memcpy(&wrapped[0], dims, sizeof dims);
  BOOST_CHECK_THROW(parse_kv_wire(wrapped), std::invalid_argument);
  BOOST_CHECK_THROW(parse_kv_wire(std::string(15, '\0')), std::invalid_argument);
}

// The wire keeps the cache's dtype: a bf16 buffer is half the bytes, reads back as f32 for the
// CPU cache, and an unknown dtype code or an f32-sized payload under a bf16 header is refused.
BOOST_AUTO_TEST_CASE(kv_wire_keeps_the_dtype_and_converts_on_read) {
  const kv_dims d{1, 2, 2, kv_dtype::bf16};
  std::string b = kv_wire_buffer(d);
  BOOST_TEST(b.size() == kv_header_bytes + 2 * 4 * 2);
  const uint16_t one = f32_to_bf16(1.5f), two = f32_to_bf16(-2.0f);
  for (int i = 0; i < 8; ++i) std::memcpy(&b[kv_header_bytes + 2 * i], i < 4 ? &one : &two, 2);
  const kv_dims got = parse_kv_wire(b);
  BOOST_TEST((got.dtype == kv_dtype::bf16));
  float k[4], v[4];
  read_kv_plane(b, got, 0, k);
  read_kv_plane(b, got, 1, v);
  BOOST_TEST(k[3] == 1.5f);
  BOOST_TEST(v[0] == -2.0f);
  std::string f32 = kv_wire_buffer({1, 2, 2, kv_dtype::f32});
  std::string lying = f32;
  const int32_t bf16_code = 1;
  std::memcpy(&lying[12], &bf16_code, 4);
  BOOST_CHECK_THROW(parse_kv_wire(lying), std::invalid_argument);
  const int32_t bad_code = 7;
  std::memcpy(&f32[12], &bad_code, 4);
  try {
    parse_kv_wire(f32);
    BOOST_FAIL("an unknown dtype was accepted");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("unknown dtype code 7") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(bad_params_are_refused) {
  decode_params p;
  p.block_length = 0;
  BOOST_CHECK_THROW(canvas::start({1}, p, 1, 0), std::invalid_argument);
  p = {};
  BOOST_CHECK_THROW(canvas::start({}, p, 1, 0), std::invalid_argument);
  BOOST_CHECK_THROW(parse_cache_mode("full"), std::invalid_argument);
}
