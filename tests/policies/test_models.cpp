#define BOOST_TEST_MODULE policies_models
#include <boost/test/unit_test.hpp>

#include "fixtures.hpp"
#include "policies/co_run.hpp"
#include "policies/predict.hpp"

#include <cmath>
#include <tuple>

using namespace dls;
using policy::step_kind;

BOOST_AUTO_TEST_SUITE(step_cost)

// The notes' roofline at full peak (989 TFLOP/s, 3.35 TB/s, no overhead): P = 128, G = 256,
// B = 32 gives refresh 5.5 ms and reuse 4.5 ms at batch 1.
BOOST_AUTO_TEST_CASE(roofline_reproduces_the_notes_table) {
  policy::roofline_params p;
  p.peak_flops = 989e12;
  p.hbm_bytes_per_s = 3.35e12;
  p.weight_bytes = 16.04e9;
  p.kv_bytes_per_token = 524288;
  p.nonembed_params = 6.98e9;
  p.head_params = 0.518e9;
  p.layers = 32;
  p.d_model = 4096;
  auto m = policy::step_cost_model::make_roofline(p, {1});
  const double refresh = m.step_seconds(1, {policy::step_item_of(step_kind::refresh, 384, 32)});
  const double reuse = m.step_seconds(1, {policy::step_item_of(step_kind::reuse, 384, 32)});
  BOOST_TEST(refresh * 1e3 == 5.5, boost::test_tools::tolerance(0.02));
  BOOST_TEST(reuse * 1e3 == 4.85, boost::test_tools::tolerance(0.08));
  // P = 3840: refresh 66.7 ms, compute-bound, so about 13x the reuse step.
  const double r2 = m.step_seconds(1, {policy::step_item_of(step_kind::refresh, 4096, 32)});
  BOOST_TEST(r2 * 1e3 == 66.7, boost::test_tools::tolerance(0.02));
}

BOOST_AUTO_TEST_CASE(tensor_parallel_divides_work_and_adds_all_reduces) {
  auto m = test::h100_roofline();
  const auto item = policy::step_item_of(step_kind::refresh, 2048, 32);
  const double t1 = m.step_seconds(1, {item}), t8 = m.step_seconds(8, {item});
  const auto& p = m.roofline();
  const double compute1 = (2 * p.nonembed_params * 2048 + 4 * p.layers * p.d_model * 2048.0 * 2048 +
                           2 * p.head_params * 32) / (p.peak_flops * p.flops_efficiency);
  BOOST_TEST(t1 == compute1 + p.step_overhead_s, boost::test_tools::tolerance(1e-9));
  const double ar = 2 * p.layers * (p.allreduce_latency_s + 2 * 7.0 / 8 * 2048 * 4096 * 2 / p.link_bytes_per_s);
  BOOST_TEST(t8 == compute1 / 8 + ar + p.step_overhead_s, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(m.supports(8));
  BOOST_TEST(!m.supports(16));
}

BOOST_AUTO_TEST_CASE(layer_split_refresh_costs_its_share_of_the_layers) {
  auto m = test::h100_roofline();
  const auto& p = m.roofline();
  namespace tt = boost::test_tools;
  // A 4,096-row refresh is compute-bound on every degree: a quarter of its layers without the
  // LM head costs a quarter of its layer FLOPs, and alone it reads a quarter of the weights.
  const auto whole = policy::step_item_of(step_kind::refresh, 4096, 32);
  const auto quarter = policy::refresh_chunk(4096, 32, 0.25, false);
  BOOST_TEST(quarter.logit_rows == 0);
  BOOST_TEST(policy::refresh_chunk(4096, 32, 0.25, true).logit_rows == 32);
  const double head_s = 2 * p.head_params * 32 / (p.peak_flops * p.flops_efficiency);
  const double layers_s = m.step_seconds(1, {whole}) - p.step_overhead_s - head_s;
  BOOST_TEST(m.step_seconds(1, {quarter}) - p.step_overhead_s == layers_s / 4, tt::tolerance(1e-9));
  // Four quarters (the last, from 0.75, with the head) do the work of the whole refresh.
  const auto last = policy::refresh_chunk(4096, 32, 0.25, true, 0.75);
  BOOST_TEST(3 * m.step_seconds(1, {quarter}) + m.step_seconds(1, {last}) - 4 * p.step_overhead_s ==
                 m.step_seconds(1, {whole}) - p.step_overhead_s,
             tt::tolerance(1e-9));
  // A chunk in a step with a reuse request reads no extra weights, but a layer's weight read
  // hides only that layer's compute. TP 2, a 256-row chunk of one layer (1/32) beside a
  // 1,024-token reuse request: in that layer the chunk's and the reuse rows' compute,
  // (2 x 6.98e9 x (256 + 32) + 4 x 32 x 4096 x (256^2 + 32 x 1024)) / 32 FLOPs at
  // 2 x 989.4e12 x 0.6 = 107 us, passes the layer's read of 1/32 of the weights and of both KV
  // caches (1,280 tokens x 512 KiB) at 2 x 3.35e12 x 0.8 B/s = 97 us; the other 31 layers stay
  // memory-bound. So the step grows by 107 - 97 us (its layer without the chunk: weights and
  // the reuse KV only) plus the chunk's all-reduce bytes.
  const auto reuse = policy::step_item_of(step_kind::reuse, 1024, 32);
  const auto tiny = policy::refresh_chunk(256, 32, 1.0 / 32, false);
  const double extra = m.step_seconds(2, {reuse, tiny}) - m.step_seconds(2, {reuse});
  const double flop_rate = 2 * p.peak_flops * p.flops_efficiency, byte_rate = 2 * p.hbm_bytes_per_s * p.bandwidth_efficiency;
  const double layer_compute = (2 * p.nonembed_params * (256 + 32) + 4 * p.layers * p.d_model * (256.0 * 256 + 32.0 * 1024)) / 32 / flop_rate;
  const double layer_read = (p.weight_bytes + p.kv_bytes_per_token * 1024) / 32 / byte_rate;
  BOOST_TEST(layer_compute > (p.weight_bytes + p.kv_bytes_per_token * 1280) / 32 / byte_rate);
  const double comm = 2 * p.layers * 2 * 0.5 * 256.0 / 32 * 4096 * 2 / p.link_bytes_per_s;
  BOOST_TEST(extra == layer_compute - layer_read + comm, tt::tolerance(1e-9));
  // A smaller chunk (64 rows) stays under its layer's read and adds only its KV bytes.
  const auto small = policy::refresh_chunk(64, 32, 1.0 / 32, false);
  const double small_extra = m.step_seconds(2, {reuse, small}) - m.step_seconds(2, {reuse});
  BOOST_TEST(small_extra == p.kv_bytes_per_token * 64 / 32 / byte_rate + 2 * p.layers * 2 * 0.5 * 64.0 / 32 * 4096 * 2 / p.link_bytes_per_s,
             tt::tolerance(1e-9));
  // Two chunks on the same layers cost more than on different ones: a layer's read hides
  // compute only once (4,096-row chunks of a quarter each, beside the reuse request).
  const auto q0 = policy::refresh_chunk(4096, 32, 0.25, false, 0.0);
  const auto q1 = policy::refresh_chunk(4096, 32, 0.25, false, 0.25);
  BOOST_TEST(m.step_seconds(1, {reuse, q0, q0}) > m.step_seconds(1, {reuse, q0, q1}));
  BOOST_TEST(m.step_seconds(1, {reuse, q0, q1}) >= m.step_seconds(1, {reuse, q0}));
  // Alone, a chunk pays only its share of the weights and of the all-reduce latencies; two
  // chunks, the union of their layers.
  policy::batch_totals t;
  t.add(tiny);
  BOOST_TEST(t.layer_fraction() == 1.0 / 32);
  t.add(reuse);
  BOOST_TEST(t.layer_fraction() == 1.0);
  t.remove(reuse);
  BOOST_TEST(t.layer_fraction() == 1.0 / 32);
  t.add(q1);  // [1/4, 1/2) beside [0, 1/32)
  BOOST_TEST(t.layer_fraction() == 1.0 / 32 + 0.25, tt::tolerance(1e-12));
  t.remove(q1);
  t.add(q0);  // [0, 1/4) contains [0, 1/32)
  BOOST_TEST(t.layer_fraction() == 0.25, tt::tolerance(1e-12));
  // The linear form scales its fixed (weight-reading) term the same way.
  auto lin = test::flat_cost(0.004, 1e-6);
  BOOST_TEST(lin.step_seconds(1, {policy::refresh_chunk(1000, 32, 0.5, false)}) == 0.002 + 500e-6, tt::tolerance(1e-12));
  // next_step_item of a request part-way through a split refresh is its remaining layers.
  auto r = test::request(1, 0, 1, 992, 32);
  r.refresh_done = 0.75;
  const auto rest = policy::next_step_item(r);
  BOOST_TEST(rest.layer_share == 0.25);
  BOOST_TEST(rest.logit_rows == 32);
  // Running part of what is left stops short (no logits); running all of it completes.
  BOOST_TEST(!policy::completes_step(r, 0.125));
  BOOST_TEST(policy::step_item_for(r, 0.125).layer_share == 0.125);
  BOOST_TEST(policy::step_item_for(r, 0.125).logit_rows == 0);
  BOOST_TEST(policy::completes_step(r, 0.25));
  BOOST_TEST(policy::step_item_for(r, 0.25).logit_rows == 32);
  r.next_kind = step_kind::reuse;  // reuse steps always complete
  BOOST_TEST(policy::completes_step(r, 1.0));
}

BOOST_AUTO_TEST_CASE(batch_totals_are_order_free_and_reversible) {
  policy::batch_totals t;
  auto a = policy::step_item_of(step_kind::refresh, 1000, 32);
  auto b = policy::step_item_of(step_kind::reuse, 500, 32);
  t.add(a);
  t.add(b);
  t.remove(a);
  BOOST_TEST(t.requests == 1.0);
  BOOST_TEST(t.query_rows == 32.0);
  BOOST_TEST(t.qk == 32.0 * 500);
}

BOOST_AUTO_TEST_CASE(fit_recovers_known_coefficients_exactly) {
  // Samples from t = 2 ms + 0.1 ms/request + 5 us/query row + 1e-9 s/(q k), TP 1; TP 2 half.
  std::vector<policy::profile_sample> s;
  for (int tp : {1, 2})
    for (int batch : {1, 4, 16})
      for (auto kind : {step_kind::refresh, step_kind::reuse})
        for (int l : {256, 1024, 4096}) {
          const int q = kind == step_kind::refresh ? l : 32;
          const double t = (2e-3 + 1e-4 * batch + 5e-6 * batch * q + 1e-9 * batch * double(q) * l) / tp;
          s.push_back({tp, kind, batch, q, l, t});
        }
  std::vector<policy::fit_report> rep;
  auto c = policy::fit_linear_step_cost(s, &rep);
  BOOST_TEST(c.at(1).fixed_s == 2e-3, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(c.at(1).per_request_s == 1e-4, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(c.at(1).per_query_row_s == 5e-6, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(c.at(1).per_qk_s == 1e-9, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(c.at(1).per_key_row_s == 0.0, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(c.at(2).fixed_s == 1e-3, boost::test_tools::tolerance(1e-6));
  BOOST_REQUIRE_EQUAL(rep.size(), 2u);
  BOOST_TEST(rep[0].r2 > 0.999999);
  BOOST_TEST(rep[0].max_rel_error < 1e-6);
}

// The CPU engine's refresh batches cost a fixed amount more than their rows explain, reuse
// batches do not: the fit finds that per-step term, and a step pays it once however many
// refreshes it holds (and a reuse-only step not at all).
BOOST_AUTO_TEST_CASE(fit_recovers_a_per_refresh_step_cost_paid_once_a_step) {
  std::vector<policy::profile_sample> s;
  for (int batch : {1, 2, 4, 8})
    for (auto kind : {step_kind::refresh, step_kind::reuse})
      for (int l : {32, 64}) {
        const int q = kind == step_kind::refresh ? l : 8;
        const double t = 4e-5 + 2.5e-5 * batch * q + 1.5e-6 * batch * l + (kind == step_kind::refresh ? 2.3e-4 : 0.0);
        s.push_back({1, kind, batch, q, l, t});
      }
  std::vector<policy::fit_report> rep;
  const auto c = policy::fit_linear_step_cost(s, &rep);
  BOOST_TEST(c.at(1).per_refresh_step_s == 2.3e-4, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(c.at(1).fixed_s == 4e-5, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(c.at(1).per_query_row_s == 2.5e-5, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(rep.at(0).max_rel_error < 1e-6);
  const auto m = policy::step_cost_model::make_linear(c);
  const auto ref = policy::step_item_of(step_kind::refresh, 64, 8);
  const auto reu = policy::step_item_of(step_kind::reuse, 64, 8);
  const double per_ref = 2.5e-5 * 64 + 1.5e-6 * 64, per_reu = 2.5e-5 * 8 + 1.5e-6 * 64;
  BOOST_TEST(m.step_seconds(1, {reu, reu}) == 4e-5 + 2 * per_reu, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(m.step_seconds(1, {ref, reu}) == 4e-5 + 2.3e-4 + per_ref + per_reu, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(m.step_seconds(1, {ref, ref, reu}) == 4e-5 + 2.3e-4 + 2 * per_ref + per_reu,
             boost::test_tools::tolerance(1e-6));
  // A profile file may state it.
  const auto parsed = policy::parse_step_cost_profile(
      "kind: linear\nlinear: {1: {fixed_s: 0.001, per_refresh_step_s: 0.002}}\n");
  BOOST_TEST(parsed.step_seconds(1, {ref}) == 0.003, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(parsed.step_seconds(1, {reu}) == 0.001, boost::test_tools::tolerance(1e-9));
}

// A mixed batch (refreshing requests beside reusing ones, as a loaded group steps them) has
// the features of its two parts summed and pays the per-refresh-step cost once; the fit learns
// from mixed samples as from pure ones, and a profile file names them `kind: mixed`.
BOOST_AUTO_TEST_CASE(mixed_batch_samples_sum_their_parts_features) {
  const auto f = policy::profile_features({1, step_kind::reuse, 8, 8, 64, 0.0, 3});
  BOOST_TEST(f[1] == 8.0);
  BOOST_TEST(f[2] == 3 * 64.0 + 5 * 8.0);             // query rows: 3 whole canvases, 5 blocks
  BOOST_TEST(f[3] == 8 * 64.0);
  BOOST_TEST(f[4] == 3 * 64.0 * 64 + 5 * 8.0 * 64);  // query x key rows
  BOOST_TEST(f[5] == 1.0);
  BOOST_TEST(policy::profile_features({1, step_kind::reuse, 8, 8, 64, 0.0, 0})[5] == 0.0);
  // Samples of t = 40 us + 25 us/query row + 1.5 us/key row + 230 us a step with a refresh,
  // mixed ones among them: the fit recovers it, and the model prices a mixed batch the same.
  std::vector<policy::profile_sample> s;
  auto t_of = [](const policy::profile_sample& x) {
    const auto g = policy::profile_features(x);
    return 4e-5 + 2.5e-5 * g[2] + 1.5e-6 * g[3] + 2.3e-4 * g[5];
  };
  for (int batch : {1, 2, 4, 8})
    for (int l : {32, 64}) {
      for (auto kind : {step_kind::refresh, step_kind::reuse}) {
        policy::profile_sample x{1, kind, batch, kind == step_kind::refresh ? l : 8, l, 0.0};
        x.seconds = t_of(x);
        s.push_back(x);
      }
      if (batch >= 2) {
        policy::profile_sample x{1, step_kind::reuse, batch, 8, l, 0.0, batch / 2};
        x.seconds = t_of(x);
        s.push_back(x);
      }
    }
  std::vector<policy::fit_report> rep;
  const auto c = policy::fit_linear_step_cost(s, &rep);
  BOOST_TEST(rep.at(0).max_rel_error < 1e-6);
  const auto m = policy::step_cost_model::make_linear(c);
  const auto ref = policy::step_item_of(step_kind::refresh, 64, 8);
  const auto reu = policy::step_item_of(step_kind::reuse, 64, 8);
  BOOST_TEST(m.step_seconds(1, {ref, ref, ref, reu, reu, reu, reu, reu}) ==
                 t_of({1, step_kind::reuse, 8, 8, 64, 0.0, 3}),
             boost::test_tools::tolerance(1e-6));
  const auto parsed = policy::parse_step_cost_profile(
      "kind: measured\nsamples:\n"
      "  - {tp: 1, kind: refresh, batch: 1, query_rows: 64, key_rows: 64, seconds: 0.002}\n"
      "  - {tp: 1, kind: mixed, refreshing: 1, batch: 2, query_rows: 8, key_rows: 64, seconds: 0.0025}\n");
  BOOST_TEST(parsed.step_seconds(1, {ref}) > 0.0);
  BOOST_CHECK_THROW(policy::parse_step_cost_profile(
                        "kind: measured\nsamples:\n"
                        "  - {tp: 1, kind: mixed, batch: 2, query_rows: 8, key_rows: 64, seconds: 0.0025}\n"),
                    std::invalid_argument);  // no `refreshing`
  BOOST_CHECK_THROW(policy::parse_step_cost_profile(
                        "kind: measured\nsamples:\n"
                        "  - {tp: 1, kind: mixed, refreshing: 3, batch: 2, query_rows: 8, key_rows: 64, seconds: 0.0025}\n"),
                    std::invalid_argument);  // more refreshing than the batch
}

BOOST_AUTO_TEST_CASE(nnls_keeps_weights_non_negative) {
  // y = 5 - x on columns [1, x]: the unconstrained slope is -1, so NNLS drops the slope and
  // the intercept becomes the mean of y, 3.
  std::vector<double> a, y;
  for (int i = 0; i < 5; ++i) {
    a.push_back(1.0);
    a.push_back(i);
    y.push_back(5.0 - i);
  }
  auto x = policy::nnls(a, y, 5, 2);
  BOOST_TEST(x[1] == 0.0);
  BOOST_TEST(x[0] == 3.0, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_CASE(measured_profile_loads_from_yaml_and_json) {
  const std::string yaml = R"(
kind: measured
hardware: cpu-test
samples:
  - {tp: 1, kind: refresh, batch: 1, query_rows: 100, key_rows: 100, seconds: 0.011}
  - {tp: 1, kind: reuse, batch: 1, query_rows: 32, key_rows: 100, seconds: 0.0042}
  - {tp: 1, kind: refresh, batch: 2, query_rows: 100, key_rows: 100, seconds: 0.021}
)";
  auto m = policy::parse_step_cost_profile(yaml);
  BOOST_TEST((m.kind() == policy::step_cost_model::form::linear));
  BOOST_TEST(m.hardware == "cpu-test");
  BOOST_TEST(m.step_seconds(1, {policy::step_item_of(step_kind::refresh, 100, 32)}) == 0.011,
             boost::test_tools::tolerance(0.05));
  const std::string json = R"({"kind": "linear", "linear": {"1": {"fixed_s": 0.5, "per_query_row_s": 0.001}}})";
  auto j = policy::parse_step_cost_profile(json);
  BOOST_TEST(j.step_seconds(1, {policy::step_item_of(step_kind::reuse, 100, 32)}) == 0.532,
             boost::test_tools::tolerance(1e-12));
  BOOST_CHECK_THROW(policy::parse_step_cost_profile("kind: guess\n"), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(gpu_check_profile_shape_loads) {
  // The shape tools/gpu_check.sh (bench_cuda_step) writes: extra keys are ignored.
  const std::string text = R"(# Measured step-cost profile
kind: measured
hardware: "NVIDIA H200"
model: "LLaDA-8B shape, random bf16 weights"
source: "bench_cuda_step 2026-11-30; gen 256, block 32, dual cache; median of 5 steps"
measured:
  gemm_bf16_flops: 7.1e14
  d2d_copy_bytes_per_s: 3.9e12
memory:
  weight_bytes: 16040000000
  kv_bytes_per_token: 524288
samples:
  - {tp: 1, kind: refresh, batch: 1, query_rows: 768, key_rows: 768, seconds: 0.016988, roofline_seconds: 0.015}
  - {tp: 1, kind: reuse, batch: 1, query_rows: 32, key_rows: 768, seconds: 0.005212, roofline_seconds: 0.0042}
  - {tp: 1, kind: refresh, batch: 8, query_rows: 768, key_rows: 768, seconds: 0.104404, roofline_seconds: 0.1}
  - {tp: 1, kind: reuse, batch: 8, query_rows: 32, key_rows: 768, seconds: 0.010196, roofline_seconds: 0.009}
)";
  auto m = policy::parse_step_cost_profile(text);
  BOOST_TEST(m.hardware == "NVIDIA H200");
  BOOST_TEST(m.tp_degrees() == std::vector<int>({1}));
  BOOST_TEST(m.memory.kv_bytes_per_token == 524288.0);
  BOOST_TEST(m.kv_capacity_tokens(1) > 1e17);  // no device size given: unbounded
  // The samples follow t = 4.5 ms + 0.2 ms/request + 16 us/query row, which non-negative
  // coefficients can express, so the fit reproduces every sample.
  for (auto [kind, b, t] : {std::tuple{step_kind::refresh, 1, 0.016988}, {step_kind::reuse, 1, 0.005212},
                            {step_kind::refresh, 8, 0.104404}, {step_kind::reuse, 8, 0.010196}}) {
    std::vector<policy::step_item> items(static_cast<std::size_t>(b), policy::step_item_of(kind, 768, 32));
    BOOST_TEST(m.step_seconds(1, items) == t, boost::test_tools::tolerance(0.01));
  }
}

BOOST_AUTO_TEST_CASE(shipped_profiles_load_with_sources) {
  auto h100 = test::h100_roofline();
  auto h200 = policy::load_step_cost_profile(std::string(DLS_SOURCE_DIR) +
                                             "/configs/sim/profiles/llada8b-h200-roofline.yaml");
  BOOST_TEST(h100.tp_degrees() == std::vector<int>({1, 2, 4, 8}));
  BOOST_TEST(!h100.source.empty());
  // Reuse is memory-bound, so more HBM bandwidth makes it faster; refresh is compute-bound.
  const auto reuse = policy::step_item_of(step_kind::reuse, 1500, 32);
  const auto refresh = policy::step_item_of(step_kind::refresh, 4000, 32);
  BOOST_TEST(h200.step_seconds(1, {reuse}) < h100.step_seconds(1, {reuse}));
  BOOST_TEST(h200.step_seconds(1, {refresh}) == h100.step_seconds(1, {refresh}), boost::test_tools::tolerance(1e-9));
  // (80 - 16.04 - 6) GB / 512 KiB per token on one H100.
  BOOST_TEST(h100.kv_capacity_tokens(1) == (80e9 - 16.04e9 - 6e9) / 524288, boost::test_tools::tolerance(1e-9));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(co_running)

namespace {
// One device, 1 TFLOP/s and 100 GB/s, 1 GB of weights, 0.2 ms of compute per query row, no
// attention FLOPs, KV, all-reduce or overhead: every step reads its weights in 10 ms. A
// 2,000-row refresh computes for 400 ms (it reads at 10 / 400 = 2.5 % of the bandwidth); a
// 10-row reuse step computes for 2 ms and takes 10 ms alone.
policy::step_cost_model toy() {
  policy::roofline_params p;
  p.peak_flops = 1e12;
  p.hbm_bytes_per_s = 1e11;
  p.weight_bytes = 1e9;
  p.nonembed_params = 1e8;
  p.layers = 1;
  return policy::step_cost_model::make_roofline(p, {1});
}
policy::batch_totals rows(int q) {
  policy::batch_totals t;
  t.add({step_kind::reuse, q, 0, 0});
  return t;
}
}  // namespace

BOOST_AUTO_TEST_CASE(each_model_shares_the_device_as_stated) {
  namespace tt = boost::test_tools;
  const auto m = toy();
  const auto refresh = rows(2000), reuse = rows(10);
  BOOST_TEST(m.step_seconds(1, refresh) == 0.4, tt::tolerance(1e-12));
  BOOST_TEST(m.step_seconds(1, reuse) == 0.01, tt::tolerance(1e-12));
  policy::co_run_config cfg;
  // Fluid: the reuse step reads at the 97.5 % the refresh leaves (10 / 0.975 ms) and holds
  // its 2 ms of compute over that time; the refresh keeps the rest.
  cfg.model = policy::co_run_model::fluid;
  auto c = policy::co_run(m, 1, reuse, refresh, cfg);
  BOOST_TEST(c.reuse_s == 0.01 / 0.975, tt::tolerance(1e-12));
  BOOST_TEST(c.reuse_share == 0.002 / c.reuse_s, tt::tolerance(1e-12));
  BOOST_TEST(c.refresh_rate == 1 - 0.195, tt::tolerance(1e-12));
  BOOST_TEST(policy::co_run_refresh_rate(m, 1, refresh, c, cfg) == c.refresh_rate, tt::tolerance(1e-12));
  // Partition, a quarter of the SMs saturating HBM: 3/16 of them pull 75 % (13.3 ms, over
  // the 10.5-ms mark); 4/16 pull all the refresh leaves (400 / 0.75 ms, reading 1.875 %),
  // 10 / 0.98125 ms, and the refresh runs on three quarters of the SMs.
  cfg.model = policy::co_run_model::partition;
  cfg.sm_saturation = 0.25;
  c = policy::co_run(m, 1, reuse, refresh, cfg);
  BOOST_TEST(c.reuse_share == 0.25, tt::tolerance(1e-12));
  BOOST_TEST(c.reuse_s == 0.01 / 0.98125, tt::tolerance(1e-12));
  BOOST_TEST(c.refresh_rate == 0.75, tt::tolerance(1e-12));
  BOOST_TEST(policy::co_run_refresh_rate(m, 1, refresh, c, cfg) == 0.75, tt::tolerance(1e-12));
  // ... and with all SMs needed to saturate it, the reuse step stops at the cap: half the
  // SMs pull half the bandwidth, 20 ms.
  cfg.sm_saturation = 1.0;
  c = policy::co_run(m, 1, reuse, refresh, cfg);
  BOOST_TEST(c.reuse_share == 0.5, tt::tolerance(1e-12));
  BOOST_TEST(c.reuse_s == 0.02, tt::tolerance(1e-12));
  BOOST_TEST(c.refresh_rate == 0.5, tt::tolerance(1e-12));
  // Tax: full speed for the reuse step, the stated slowdown for the refresh, any profile.
  cfg.model = policy::co_run_model::tax;
  cfg.tax = 0.3;
  c = policy::co_run(m, 1, reuse, refresh, cfg);
  BOOST_TEST(c.reuse_s == 0.01, tt::tolerance(1e-12));
  BOOST_TEST(c.refresh_rate == 0.7, tt::tolerance(1e-12));
  const auto flat = test::flat_cost(0.01);
  BOOST_TEST(policy::co_run(flat, 1, reuse, refresh, cfg).refresh_rate == 0.7, tt::tolerance(1e-12));
  cfg.model = policy::co_run_model::fluid;
  BOOST_CHECK_THROW(policy::co_run(flat, 1, reuse, refresh, cfg), std::invalid_argument);
  BOOST_TEST((policy::parse_co_run_model("partition") == policy::co_run_model::partition));
  try {
    policy::parse_co_run_model("overlap");
    BOOST_ERROR("accepted an unknown co-run model");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("'overlap'") != std::string::npos);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(quality)

BOOST_AUTO_TEST_CASE(published_curve_and_interpolation) {
  auto q = test::fastdllm_quality();
  BOOST_TEST(q.accuracy(0.9) == 0.792, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(q.tokens_per_step(0.9) == 3.25, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(q.accuracy(0.85) == (0.777 + 0.792) / 2, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(q.tokens_per_step(2.0) == 1.0);       // clamped at the ends
  BOOST_TEST(q.steps_for(32, 0.9) == 32 / 3.25, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(q.steps_for(2, 0.5) == 1.0);          // at least one step
  BOOST_TEST(q.source.find("2505.22618") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(eval_json_array_and_yaml_list) {
  // `dilaserve eval --json` objects; null threshold = one token per step; percent accuracy.
  const std::string json = R"([
    {"threshold": null, "accuracy": 0.40, "tokens_per_step": 1.0, "steps": 64, "per_task": {}},
    {"threshold": 0.9, "accuracy": 38.0, "tokens_per_step": 2.5, "steps": 26, "per_task": {"a": 1}},
    {"threshold": 0.9, "accuracy": 0.40, "tokens_per_step": 3.5, "steps": 20, "per_task": {}}])";
  auto q = policy::parse_quality_curve(json);
  BOOST_REQUIRE_EQUAL(q.points().size(), 2u);
  BOOST_TEST(q.tau_max() == 1.0);
  BOOST_TEST(q.accuracy(0.9) == 0.39, boost::test_tools::tolerance(1e-12));   // averaged
  BOOST_TEST(q.tokens_per_step(0.9) == 3.0, boost::test_tools::tolerance(1e-12));
  auto y = policy::parse_quality_curve("- {tau: 0.5, accuracy: 0.5, tokens_per_step: 4}\n"
                                       "- {tau: 1.0, accuracy: 0.6, tokens_per_step: 1}\n");
  BOOST_TEST(y.tokens_per_step(0.75) == 2.5, boost::test_tools::tolerance(1e-12));
  BOOST_CHECK_THROW(policy::parse_quality_curve("[]"), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(remaining_steps_and_isolated_latency) {
  auto q = test::two_step_quality();  // 2 steps per block
  auto r = test::request(1, 0, 1, 100, 96);  // 3 blocks
  auto c = policy::remaining_steps(r, 0.9, q);
  BOOST_TEST(c.refresh == 3.0);
  BOOST_TEST(c.reuse == 3.0);
  r.blocks_done = 1;
  r.steps_in_block = 1;
  r.masks_left_in_block = 16;
  c = policy::remaining_steps(r, 0.9, q);
  BOOST_TEST(c.refresh == 1.0);   // the last block
  BOOST_TEST(c.reuse == 2.0);     // 16 masks now (1 step) + 1 in the last block
  auto m = test::flat_cost(0.01, 1e-5);
  // 3 blocks x (refresh 0.01 + 196e-5, reuse 0.01 + 32e-5)
  BOOST_TEST(policy::isolated_latency_s(m, q, 100, 96, 32, 0.9) == 3 * (0.01196 + 0.01032),
             boost::test_tools::tolerance(1e-12));
}

// eval's block_steps (blocks by the steps they took) give the spread that refresh_interval
// turns into refreshes: here every block at tau 0.5 takes 1 or 5 steps (mean 3), at 0.9 always 6.
BOOST_AUTO_TEST_CASE(measured_block_steps_decide_the_refreshes_inside_a_block) {
  namespace tt = boost::test_tools;
  auto q = policy::parse_quality_curve(R"([
    {"threshold": 0.5, "accuracy": 0.5, "tokens_per_step": 2.0, "block_length": 6, "block_steps": [3, 0, 0, 0, 3]},
    {"threshold": 0.9, "accuracy": 0.9, "tokens_per_step": 1.0, "block_length": 6, "block_steps": [0, 0, 0, 0, 0, 7]}])");
  BOOST_TEST(q.measured_block_steps(8, 0.7).empty());  // measured at another block length
  const auto d = q.measured_block_steps(6, 0.6);  // a quarter of the way: 3/4 of tau 0.5's
  BOOST_TEST_REQUIRE(d.size() == 6u);
  BOOST_TEST(d[0] == 0.375, tt::tolerance(1e-12));
  BOOST_TEST(d[4] == 0.375, tt::tolerance(1e-12));
  BOOST_TEST(d[5] == 0.25, tt::tolerance(1e-12));
  // No refresh_interval: one refresh a block, steps_for steps.
  BOOST_TEST(q.refresh_share(6, 0.5) == 1.0 / 3.0, tt::tolerance(1e-12));
  BOOST_TEST(q.steps_per_refresh(6, 0.5) == 3.0, tt::tolerance(1e-12));
  BOOST_TEST(q.refreshes_left_in_block(1, 4.0) == 0.0);
  // Every 4 steps: a block of 1 step refreshes once, one of 5 twice (steps 0 and 4), one of 6 twice.
  q.set_refresh_interval(4);
  BOOST_TEST(q.refresh_share(6, 0.5) == 1.5 / 3.0, tt::tolerance(1e-12));
  BOOST_TEST(q.steps_per_refresh(6, 0.9) == 3.0, tt::tolerance(1e-12));
  BOOST_TEST(q.refreshes_left_in_block(1, 2.0) == 0.0);  // steps 1 and 2
  BOOST_TEST(q.refreshes_left_in_block(3, 2.0) == 1.0);  // steps 3 and 4
  BOOST_TEST(q.refreshes_left_in_block(2, 7.0) == 2.0);  // steps 2 to 8
  // remaining_steps: two whole blocks of 6 steps at tau 0.9 refresh twice each, and the block in
  // progress (after 3 steps, 3 masks left: 3 steps, the 4th of them refreshing) once more.
  auto r = test::request(1, 0, 1, 10, 18);  // 3 blocks of 6
  r.block_len = 6;
  r.steps_in_block = 3;
  r.masks_left_in_block = 3;
  auto c = policy::remaining_steps(r, 0.9, q);
  BOOST_TEST(c.refresh == 2 * 2.0 + 1.0, tt::tolerance(1e-12));
  BOOST_TEST(c.reuse == 2 * 4.0 + 2.0, tt::tolerance(1e-12));
  // Alone: 3 blocks x (2 refreshes + 4 reuses).
  auto m = test::flat_cost(0.01, 1e-5);
  policy::batch_totals ref, reu;
  ref.add(policy::step_item_of(policy::step_kind::refresh, 28, 6));
  reu.add(policy::step_item_of(policy::step_kind::reuse, 28, 6));
  BOOST_TEST(policy::isolated_latency_s(m, q, 10, 18, 6, 0.9) ==
                 3 * (2 * m.step_seconds(1, ref) + 4 * m.step_seconds(1, reu)),
             tt::tolerance(1e-12));
  // Between tau 0.5 and 0.9 the moments mix as the distributions do: at 0.6, E[s] = 3/4 x 3 +
  // 1/4 x 6 and E[refreshes] = 3/4 x 1.5 + 1/4 x 2.
  BOOST_TEST(q.refresh_share(6, 0.6) == (0.75 * 1.5 + 0.25 * 2.0) / (0.75 * 3.0 + 0.25 * 6.0), tt::tolerance(1e-12));
  // Not measured: the two integers around steps_for, weighted to its mean (2.5 -> 2 or 3 steps,
  // every 2 steps: 1 or 2 refreshes).
  auto y = policy::parse_quality_curve("- {tau: 0.5, accuracy: 0.5, tokens_per_step: 4}\n");
  BOOST_TEST(y.measured_block_steps(10, 0.5).empty());
  y.set_refresh_interval(2);
  BOOST_TEST(y.refresh_share(10, 0.5) == 1.5 / 2.5, tt::tolerance(1e-12));
  BOOST_CHECK_THROW(policy::parse_quality_curve(R"([{"threshold": 0.5, "accuracy": 0.5, "tokens_per_step": 2, "block_steps": [1]}])"),
                    std::invalid_argument);  // no block_length
  BOOST_CHECK_THROW(policy::parse_quality_curve(R"([{"threshold": 0.5, "accuracy": 0.5, "tokens_per_step": 2, "block_length": 4, "block_steps": [-1]}])"),
                    std::invalid_argument);
}

// A decision reads the curve once per (block length, tau) and reuses the read for every request:
// the figures must be those of a fresh read to the bit, whatever the request's progress, for
// block lengths measured and not, and past the cache's capacity.
BOOST_AUTO_TEST_CASE(a_decisions_cached_curve_reads_equal_fresh_ones) {
  auto q = policy::parse_quality_curve(R"([
    {"threshold": 0.5, "accuracy": 0.5, "tokens_per_step": 2.0, "block_length": 6, "block_steps": [3, 0, 0, 0, 3]},
    {"threshold": 0.9, "accuracy": 0.9, "tokens_per_step": 1.0, "block_length": 6, "block_steps": [0, 0, 0, 0, 0, 7]}])");
  for (int every : {0, 4}) {
    q.set_refresh_interval(every);
    policy::curve_cache cache(q);
    std::vector<policy::request_view> reqs;
    for (int block : {6, 8})
      for (int done = 0; done < 3; ++done)
        for (int in_block = 0; in_block < 3; ++in_block) {
          auto r = test::request(reqs.size() + 1, 0, 1, 10, 3 * block);
          r.block_len = block;
          r.blocks_done = done;
          r.steps_in_block = in_block;
          r.masks_left_in_block = in_block > 0 ? block - 2 * in_block : 0;
          reqs.push_back(r);
        }
    for (int pass = 0; pass < 2; ++pass)  // the second pass is served from the cache
      for (int k = 0; k < 40; ++k) {      // more taus than the cache holds
        const double tau = 0.45 + 0.0125 * k;
        for (const auto& r : reqs) {
          const auto fresh = policy::remaining_steps(r, tau, q);
          const auto cached = cache.remaining_steps(r, tau);
          BOOST_TEST(cached.refresh == fresh.refresh);
          BOOST_TEST(cached.reuse == fresh.reuse);
        }
        BOOST_TEST(cache.accuracy(tau) == q.accuracy(tau));
      }
  }
}

BOOST_AUTO_TEST_SUITE_END()
