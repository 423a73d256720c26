#define BOOST_TEST_MODULE gpu_kernels
#include "gpu/allreduce.hpp"
#include "gpu/cpu_kernels.hpp"
#include "gpu/cpu_packed_gemm.hpp"
#include "gpu/cpu_small_attention.hpp"

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

using namespace dls::gpu;

namespace {

std::vector<float> randn(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

void close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(std::fabs(a[i] - b[i]) <= tol, "index " << i << ": " << a[i] << " vs " << b[i]);
}

}  // namespace

BOOST_AUTO_TEST_CASE(matmul_matches_naive_with_strides) {
  const int rows = 7, in = 13, out = 5, ldw = 20;  // W is a column slice of a wider matrix
  auto x = randn(rows * in, 1), w = randn(out * ldw, 2);
  std::vector<float> y(rows * out), ref(rows * out);
  cpu::matmul_xwt(x.data(), rows, in, in, w.data() + 3, out, ldw, y.data(), out);
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double s = 0;
      for (int i = 0; i < in; ++i) s += double(x[r * in + i]) * w[o * ldw + 3 + i];
      ref[r * out + o] = float(s);
    }
  close(y, ref, 1e-4f);
}

// The packed small-M kernel against a double-precision reference: every tile edge (rows not a
// multiple of 4, columns not a multiple of 24, K spanning several K slices and not a multiple of
// them) and weights that are a column slice of a wider matrix, as a TP shard's attn_out is.
BOOST_AUTO_TEST_CASE(packed_matmul_matches_naive_at_every_edge) {
  if (!cpu::packed_gemm_available()) {
    BOOST_TEST_MESSAGE("packed kernel: this CPU lacks AVX2/FMA; the backend uses OpenBLAS only");
    return;
  }
  const int shapes[][3] = {{1, 5, 1}, {3, 24, 7}, {4, 48, 256}, {7, 25, 257}, {32, 100, 600}, {47, 47, 513}, {48, 8, 64}};
  for (const auto& sh : shapes) {
    const int rows = sh[0], out = sh[1], in = sh[2], ldw = in + 5, ldx = in + 3, ldy = out + 2;
    auto x = randn(static_cast<std::size_t>(rows) * ldx, 11), w = randn(static_cast<std::size_t>(out) * ldw, 12);
    cpu::packed_weights pw(w.data() + 2, out, in, ldw);
    std::vector<float> y(static_cast<std::size_t>(rows) * ldy, 7.0f);
    cpu::matmul_packed(x.data(), rows, ldx, pw, y.data(), ldy);
    for (int r = 0; r < rows; ++r) {
      for (int o = 0; o < out; ++o) {
        double s = 0;
        for (int i = 0; i < in; ++i) s += double(x[r * ldx + i]) * w[o * ldw + 2 + i];
        BOOST_TEST(std::fabs(y[r * ldy + o] - s) <= 1e-4 * std::sqrt(double(in)) + 1e-5,
                   rows << "x" << out << "x" << in << " at " << r << "," << o);
      }
      for (int o = out; o < ldy; ++o) BOOST_TEST(y[r * ldy + o] == 7.0f);  // padding columns untouched
    }
  }
  BOOST_CHECK_THROW(cpu::matmul_packed(nullptr, cpu::packed_weights::max_rows + 1, 1,
                                       cpu::packed_weights(std::vector<float>(4, 1.0f).data(), 2, 2, 2), nullptr, 1),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(rmsnorm_matches_naive) {
  const int rows = 3, d = 17;
  auto x = randn(rows * d, 3), w = randn(d, 4);
  std::vector<float> y(rows * d), ref(rows * d);
  cpu::rmsnorm(x.data(), w.data(), y.data(), rows, d, 1e-5f);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += double(x[r * d + i]) * x[r * d + i];
    double inv = 1.0 / std::sqrt(ss / d + 1e-5);
    for (int i = 0; i < d; ++i) ref[r * d + i] = float(x[r * d + i] * inv * w[i]);
  }
  close(y, ref, 1e-5f);
}

BOOST_AUTO_TEST_CASE(rope_rotates_half_split_pairs) {
  const int rows = 4, heads = 2, hd = 8, ld = heads * hd;
  auto x = randn(rows * ld, 5);
  auto ref = x;
  std::vector<int32_t> pos{0, 3, 17, 100};
  cpu::rope(x.data(), pos.data(), rows, heads, hd, ld, 10000.0f);
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        double ang = pos[r] * std::pow(10000.0, -2.0 * i / hd);
        float a = ref[r * ld + h * hd + i], b = ref[r * ld + h * hd + i + hd / 2];
        float ea = float(a * std::cos(ang) - b * std::sin(ang)), eb = float(b * std::cos(ang) + a * std::sin(ang));
        BOOST_TEST(std::fabs(x[r * ld + h * hd + i] - ea) < 1e-4f);
        BOOST_TEST(std::fabs(x[r * ld + h * hd + i + hd / 2] - eb) < 1e-4f);
      }
  // Position 0 is the identity.
  for (int i = 0; i < ld; ++i) BOOST_TEST(x[i] == ref[i]);
}

namespace {

// cpu::attention against a double-precision reference, with the query, key and output rows
// interleaved with unrelated columns (ld wider than the heads), as in the backend's buffers.
void check_attention(int tq, int tk, int heads, int kvh, int hd, unsigned seed) {
  const int ldq = heads * hd + 3, ldk = kvh * hd + 5, ldo = heads * hd + 1;
  auto q = randn(std::size_t(tq) * ldq, seed), k = randn(std::size_t(tk) * ldk, seed + 1),
       v = randn(std::size_t(tk) * ldk, seed + 2);
  std::vector<float> out(std::size_t(tq) * ldo, 0.0f), ref(out.size(), 0.0f), scratch;
  cpu::attention(q.data(), tq, ldq, k.data(), v.data(), tk, ldk, heads, kvh, hd, out.data(), ldo, scratch);
  for (int h = 0; h < heads; ++h) {
    int kh = h / (heads / kvh);
    for (int r = 0; r < tq; ++r) {
      std::vector<double> s(tk);
      double m = -1e30;
      for (int j = 0; j < tk; ++j) {
        double dot = 0;
        for (int e = 0; e < hd; ++e) dot += double(q[r * ldq + h * hd + e]) * k[j * ldk + kh * hd + e];
        s[j] = dot / std::sqrt(double(hd));
        m = std::max(m, s[j]);
      }
      double z = 0;
      for (auto& x : s) z += (x = std::exp(x - m));
      for (int e = 0; e < hd; ++e) {
        double acc = 0;
        for (int j = 0; j < tk; ++j) acc += s[j] / z * v[j * ldk + kh * hd + e];
        ref[r * ldo + h * hd + e] = float(acc);
      }
    }
  }
  BOOST_TEST_CONTEXT("tq " << tq << " tk " << tk << " heads " << heads << "/" << kvh << " hd " << hd) { close(out, ref, 2e-5f); }
}

}  // namespace

BOOST_AUTO_TEST_CASE(attention_arbitrary_rows_with_gqa) {
  check_attention(3, 9, 4, 2, 6, 6);    // OpenBLAS path (head size not a multiple of 16)
  check_attention(65, 40, 2, 2, 16, 9);  // OpenBLAS path (more queries than a block)
}

// The small-query path of a dual-cache reuse step: every tile edge in keys (not a multiple of 4)
// and queries (not a multiple of 4 or 16), one to 64 queries, grouped KV heads.
BOOST_AUTO_TEST_CASE(small_query_attention_matches_reference) {
  if (!cpu::small_attention_fits(8, 32)) {
    BOOST_TEST_MESSAGE("small-query attention: this CPU lacks AVX2/FMA; OpenBLAS serves every shape");
    return;
  }
  BOOST_TEST(!cpu::small_attention_fits(65, 32));
  BOOST_TEST(!cpu::small_attention_fits(8, 24));
  const int shapes[][5] = {{1, 5, 2, 1, 16}, {8, 37, 4, 2, 32}, {32, 1024, 2, 2, 64}, {33, 100, 4, 4, 16},
                           {64, 7, 2, 1, 32}, {5, 1, 1, 1, 128}};
  unsigned seed = 20;
  for (const auto& s : shapes) check_attention(s[0], s[1], s[2], s[3], s[4], seed += 3);
}

BOOST_AUTO_TEST_CASE(swiglu_is_silu_gate_times_up) {
  std::vector<float> g{-3.0f, 0.0f, 0.5f, 4.0f}, u{2.0f, 5.0f, -1.0f, 0.25f};
  auto ref = g;
  for (std::size_t i = 0; i < g.size(); ++i) ref[i] = float(g[i] / (1 + std::exp(-double(g[i]))) * u[i]);
  cpu::swiglu(g.data(), u.data(), g.size());
  close(g, ref, 1e-6f);
}

BOOST_AUTO_TEST_CASE(propose_skips_the_mask_and_reports_clean_probability) {
  std::vector<float> logits{1.0f, 5.0f, 2.0f, 2.0f};  // id 1 (mask) is largest but suppressed
  auto r = cpu::propose(logits.data(), 4, 1, 0.0, 0, 0, 0);
  BOOST_TEST(r.token == 2);  // ties break to the lower id
  double z = std::exp(1.0) + 2 * std::exp(2.0);
  BOOST_TEST(std::fabs(r.confidence - std::exp(2.0) / z) < 1e-6);  // float exponentials, double sum
}

BOOST_AUTO_TEST_CASE(gumbel_sampling_follows_softmax) {
  // With temperature T the proposal is a sample from softmax(l / T): check frequencies.
  std::vector<float> logits{0.0f, 0.0f, std::log(3.0f)};  // p = 1/5, 1/5, 3/5 at T = 1
  int counts[3] = {0, 0, 0};
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[cpu::propose(logits.data(), 3, -1, 1.0, 42, uint64_t(i), 7).token]++;
  BOOST_TEST(std::fabs(counts[2] / double(n) - 0.6) < 0.02);
  BOOST_TEST(std::fabs(counts[0] / double(n) - 0.2) < 0.02);
  // Reproducible for the same coordinates.
  BOOST_TEST(cpu::gumbel_noise(1, 2, 3, 4) == cpu::gumbel_noise(1, 2, 3, 4));
  BOOST_TEST(cpu::gumbel_noise(1, 2, 3, 4) != cpu::gumbel_noise(1, 3, 3, 4));
}

// The TP barrier spins briefly and then sleeps until the last rank arrives. Ranks that arrive
// a millisecond late (a descheduled thread on a shared host) put the others to sleep; every
// round must still end with the same, exact sum on every rank.
BOOST_AUTO_TEST_CASE(the_tp_allreduce_sums_exactly_when_ranks_sleep_at_the_barrier) {
  constexpr int world = 3, rounds = 400;
  shm_allreduce_group group(world);
  std::vector<std::vector<float>> seen(world, std::vector<float>(rounds));
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      auto ep = group.endpoint(r);
      std::vector<float> v(64);
      for (int i = 0; i < rounds; ++i) {
        // Rank 1 is late every tenth round, rank 2 every seventh: both late at once sometimes.
        if ((r == 1 && i % 10 == 0) || (r == 2 && i % 7 == 0)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        for (std::size_t j = 0; j < v.size(); ++j) v[j] = static_cast<float>(r + 1) * static_cast<float>(i + static_cast<int>(j));
        ep->sum(v.data(), v.size());
        seen[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] = v[5];
      }
    });
  for (auto& t : ranks) t.join();
  // Sum over ranks of (r + 1) (i + 5) = 6 (i + 5), exact in float at these sizes.
  for (int r = 0; r < world; ++r)
    for (int i = 0; i < rounds; ++i)
      BOOST_TEST(seen[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] == 6.0f * static_cast<float>(i + 5));
}
