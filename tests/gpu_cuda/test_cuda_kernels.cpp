// Kernel parity: each CUDA kernel against the CPU kernel (gpu/cpu_kernels.hpp) on random inputs
// of several shapes. Where the CUDA backend stores bf16, the CPU reference gets the same
// bf16-rounded inputs, so the tolerance covers only output rounding and summation order.
#define BOOST_TEST_MODULE cuda_kernels
#include "cuda_test_support.hpp"

#include "gpu/cpu_kernels.hpp"
#include "gpu/cuda/cuda_testing.hpp"

#include <tuple>

using namespace dls::gpu;
using namespace dls_test;
namespace ct = dls::gpu::cuda_testing;

DLS_CUDA_TEST_MAIN(1)

BOOST_AUTO_TEST_CASE(rmsnorm_matches_cpu) {
  // Vectorised kernel (d % 4 == 0, 1 to 8 float4 per thread) and the scalar one (d = 1002).
  for (auto [rows, d] : std::vector<std::pair<int, int>>{{1, 32}, {7, 128}, {33, 4096}, {3, 1000}, {2, 8192}, {2, 1002}}) {
    for (bool with_add : {false, true}) {
      const std::size_t n = static_cast<std::size_t>(rows) * d;
      auto x = randn(n, 11 + rows, 2.0f), w = randn(static_cast<std::size_t>(d), 12 + d);
      std::vector<float> add;
      if (with_add) add = randn(n, 13 + rows);
      std::vector<float> sum;
      auto got = ct::rmsnorm(0, x, add, w, rows, d, 1e-5f, &sum);
      auto ref_in = x;
      if (with_add)
        for (std::size_t i = 0; i < n; ++i) ref_in[i] += add[i];
      std::vector<float> ref(n);
      cpu::rmsnorm(ref_in.data(), w.data(), ref.data(), rows, d, 1e-5f);
      BOOST_TEST_CONTEXT("rows " << rows << " d " << d << " add " << with_add) {
        BOOST_TEST(rel_l2(sum, ref_in) == 0.0);  // the residual add is the same f32 addition
        BOOST_TEST(rel_l2(got, ref) < 4e-3);
        BOOST_TEST(rel_max(got, ref) < 8e-3);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(gemm_matches_cpu) {
  for (auto [rows, in, out] : std::vector<std::tuple<int, int, int>>{
           {1, 64, 32}, {17, 128, 96}, {64, 4096, 512}, {300, 256, 1000}, {5, 352, 128}}) {
    auto x = round_bf16(randn(static_cast<std::size_t>(rows) * in, 21 + rows));
    auto w = round_bf16(randn(static_cast<std::size_t>(out) * in, 22 + out, 1.0f / std::sqrt(float(in))));
    auto got = ct::gemm_xwt(0, x, rows, in, w, out);
    std::vector<float> ref(static_cast<std::size_t>(rows) * out);
    cpu::matmul_xwt(x.data(), rows, in, in, w.data(), out, in, ref.data(), out);
    BOOST_TEST_CONTEXT("rows " << rows << " in " << in << " out " << out) {
      BOOST_TEST(rel_l2(got, ref) < 1e-4);
    }
  }
}

BOOST_AUTO_TEST_CASE(rope_and_kv_scatter_match_cpu) {
  struct shape {
    int heads, kv_heads, hd;
    float theta;
    int max_pos;
  };
  for (auto s : std::vector<shape>{{4, 4, 32, 1e4f, 8}, {8, 2, 128, 5e5f, 4000}, {2, 2, 8, 1e4f, 100}}) {
    const int rows = 9;
    const std::size_t qs = static_cast<std::size_t>(s.heads) * s.hd, kvs = static_cast<std::size_t>(s.kv_heads) * s.hd;
    auto q = randn(rows * qs, 31 + s.hd), k = randn(rows * kvs, 32 + s.hd), v = randn(rows * kvs, 33 + s.hd);
    std::vector<int32_t> pos(rows);
    std::mt19937 rng(7);
    for (auto& p : pos) p = static_cast<int32_t>(rng() % static_cast<unsigned>(s.max_pos));
    auto got = ct::rope(0, q, k, v, pos, s.heads, s.kv_heads, s.hd, s.theta);
    auto rq = q, rk = k;
    cpu::rope(rq.data(), pos.data(), rows, s.heads, s.hd, static_cast<int>(qs), s.theta);
    cpu::rope(rk.data(), pos.data(), rows, s.kv_heads, s.hd, static_cast<int>(kvs), s.theta);
    BOOST_TEST_CONTEXT("heads " << s.heads << " kv " << s.kv_heads << " hd " << s.hd) {
      BOOST_TEST(rel_l2(got.q, rq) < 4e-3);
      BOOST_TEST(rel_l2(got.k, rk) < 4e-3);
      BOOST_TEST(rel_l2(got.v, round_bf16(v)) == 0.0);
    }
  }
}

namespace {

struct attn_case {
  int heads, kv_heads, hd;
  std::vector<std::pair<int, int>> items;  // (query rows, key rows)
};

void check_attention(const attn_case& c, cuda_attention impl, int splits) {
  const std::size_t qs = static_cast<std::size_t>(c.heads) * c.hd, kvs = static_cast<std::size_t>(c.kv_heads) * c.hd;
  std::vector<int> tq, tk;
  std::vector<std::vector<float>> k, v;
  int R = 0;
  uint64_t seed = 41;
  for (auto [q_rows, k_rows] : c.items) {
    tq.push_back(q_rows);
    tk.push_back(k_rows);
    k.push_back(round_bf16(randn(static_cast<std::size_t>(k_rows) * kvs, ++seed)));
    v.push_back(round_bf16(randn(static_cast<std::size_t>(k_rows) * kvs, ++seed)));
    R += q_rows;
  }
  auto q = round_bf16(randn(static_cast<std::size_t>(R) * qs, ++seed));
  auto got = ct::attention(0, q, tq, k, v, tk, c.heads, c.kv_heads, c.hd, impl, splits);
  std::vector<float> ref(static_cast<std::size_t>(R) * qs), scratch;
  std::size_t off = 0;
  for (std::size_t i = 0; i < tq.size(); ++i) {
    cpu::attention(q.data() + off * qs, tq[i], static_cast<int>(qs), k[i].data(), v[i].data(), tk[i],
                   static_cast<int>(kvs), c.heads, c.kv_heads, c.hd, ref.data() + off * qs, static_cast<int>(qs),
                   scratch);
    off += static_cast<std::size_t>(tq[i]);
  }
  BOOST_TEST_CONTEXT("heads " << c.heads << " kv " << c.kv_heads << " hd " << c.hd << " items " << c.items.size()
                              << " impl " << static_cast<int>(impl) << " splits " << splits) {
    BOOST_TEST(rel_l2(got, ref) < 1e-2);
    BOOST_TEST(rel_max(got, ref) < 3e-2);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(attention_matches_cpu) {
  const std::vector<attn_case> tc_cases = {
      {4, 4, 32, {{5, 40}, {64, 64}, {70, 130}}},
      {2, 2, 128, {{32, 300}, {1, 1}, {100, 2304}}},
      {8, 2, 64, {{17, 200}}},
      {4, 2, 128, {{33, 1000}, {64, 77}, {130, 65}}},
      // Reuse-step shapes (every item <= 32 query rows): the mma kernel's 2-warp tiles.
      {4, 4, 128, {{32, 700}, {8, 64}, {32, 1500}}},
      {4, 4, 32, {{32, 96}, {3, 40}}},
  };
  for (const auto& c : tc_cases)
    for (auto impl : {cuda_attention::mma, cuda_attention::tensor_core, cuda_attention::scalar})
      for (int splits : {1, 3, 0}) check_attention(c, impl, splits);
  // Head dim 96: the mma kernel and the scalar one.
  for (auto impl : {cuda_attention::mma, cuda_attention::scalar})
    for (int splits : {1, 2}) check_attention({3, 3, 96, {{20, 100}, {64, 64}}}, impl, splits);
  // Head dims only the scalar kernel takes.
  for (const auto& c : std::vector<attn_case>{{4, 4, 8, {{9, 33}, {2, 65}}}, {2, 1, 48, {{3, 70}}}})
    for (int splits : {1, 2}) check_attention(c, cuda_attention::scalar, splits);
}

BOOST_AUTO_TEST_CASE(swiglu_matches_cpu) {
  // 16-byte vectors (n % 8 == 0) and the element-wise fallback (n = 1001).
  for (std::size_t n : {std::size_t{1000}, std::size_t{1001}, std::size_t{3} * 12288}) {
    auto g = round_bf16(randn(n, 51, 3.0f)), u = round_bf16(randn(n, 52));
    auto got = ct::swiglu(0, g, u);
    auto ref = g;
    cpu::swiglu(ref.data(), u.data(), n);
    BOOST_TEST(rel_l2(got, ref) < 4e-3);
  }
}

BOOST_AUTO_TEST_CASE(propose_matches_cpu) {
  // Both families: at T > 0 Dream's confidence is taken of softmax(l / T), LLaDA's of softmax(l).
  for (auto family : {sampler_family::llada, sampler_family::dream}) {
    for (int n : {46, 1000, 126464}) {
      for (double temp : {0.0, 0.7}) {
        const int rows = 6;
        auto logits = randn(static_cast<std::size_t>(rows) * n, 61 + n, 3.0f);
        const int32_t suppressed = n / 3;
        // Row 1: the suppressed id holds the maximum. Row 2: two equal maxima (lowest index wins).
        logits[static_cast<std::size_t>(n) + suppressed] = 100.0f;
        logits[2 * static_cast<std::size_t>(n) + 5] = 50.0f;
        logits[2 * static_cast<std::size_t>(n) + 9] = 50.0f;
        std::vector<int32_t> canvas_rows = {3, 4, 5, 17, 18, 40};
        auto got = ct::propose(0, logits, n, suppressed, temp, 1234, 7, canvas_rows, score_temperature(family, temp));
        BOOST_REQUIRE_EQUAL(got.size(), static_cast<std::size_t>(rows));
        for (int j = 0; j < rows; ++j) {
          auto ref = cpu::propose(logits.data() + static_cast<std::size_t>(j) * n, n, suppressed, temp, 1234, 7,
                                  canvas_rows[static_cast<std::size_t>(j)], proposal_score::probability, family);
          BOOST_TEST_CONTEXT(architecture_name(family == sampler_family::dream ? architecture::dream
                                                                               : architecture::llada)
                             << " n " << n << " T " << temp << " row " << j) {
            BOOST_TEST(got[static_cast<std::size_t>(j)].token == ref.token);
            // The CPU takes LLaDA's exponentials in float (cpu_softmax.cpp, ~1e-7 relative), the
            // GPU in double.
            BOOST_TEST(std::fabs(got[static_cast<std::size_t>(j)].confidence - ref.confidence) <=
                       1e-6 * std::max(1e-30, ref.confidence));
          }
        }
        if (temp == 0.0) BOOST_TEST(got[2].token == 5);
      }
    }
  }
}
