#include "gpu/cpu_small_attention.hpp"

#include "gpu/cpu_packed_gemm.hpp"
#include "gpu/cpu_softmax.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DLS_SMALL_ATTN_X86 1
#endif

namespace dls::gpu::cpu {

namespace {
constexpr int QW = 16;        // queries per packed panel (two AVX registers)
constexpr int max_queries = 64;
constexpr int KJ = 64;        // keys per slice of the weighted sum
}  // namespace

bool small_attention_fits(int tq, int hd) {
#ifdef DLS_SMALL_ATTN_X86
  return packed_gemm_available() && tq >= 1 && tq <= max_queries && hd >= QW && hd % QW == 0;
#else
  (void)tq, (void)hd;
  return false;
#endif
}

#ifdef DLS_SMALL_ATTN_X86

namespace {

constexpr int prefetch_rows = 16;  // how many cached rows ahead the key and value loops prefetch

void prefetch_row(const float* row, int n) {
  for (int i = 0; i < n; i += 16) _mm_prefetch(reinterpret_cast<const char*>(row + i), _MM_HINT_T0);
}

// S^T rows j..j+3 (keys) x 16 queries of one panel: sum over d of K[j][d] * Q[i][d], scaled.
// qp holds the panel d-major (16 queries per d); the key rows are read in place.
__attribute__((target("avx2,fma"))) void scores_tile(const float* k0, const float* k1, const float* k2,
                                                     const float* k3, const float* qp, int hd, float scale, float* st,
                                                     int ld, int nrows) {
  __m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
  for (int d = 0; d < hd; ++d) {
    const __m256 q0 = _mm256_loadu_ps(qp + d * QW), q1 = _mm256_loadu_ps(qp + d * QW + 8);
    __m256 x = _mm256_broadcast_ss(k0 + d);
    a0 = _mm256_fmadd_ps(x, q0, a0), b0 = _mm256_fmadd_ps(x, q1, b0);
    x = _mm256_broadcast_ss(k1 + d);
    a1 = _mm256_fmadd_ps(x, q0, a1), b1 = _mm256_fmadd_ps(x, q1, b1);
    x = _mm256_broadcast_ss(k2 + d);
    a2 = _mm256_fmadd_ps(x, q0, a2), b2 = _mm256_fmadd_ps(x, q1, b2);
    x = _mm256_broadcast_ss(k3 + d);
    a3 = _mm256_fmadd_ps(x, q0, a3), b3 = _mm256_fmadd_ps(x, q1, b3);
  }
  const __m256 s = _mm256_set1_ps(scale);
  const __m256 rows[4][2] = {{a0, b0}, {a1, b1}, {a2, b2}, {a3, b3}};
  for (int r = 0; r < nrows; ++r) {
    _mm256_storeu_ps(st + static_cast<std::size_t>(r) * ld, _mm256_mul_ps(rows[r][0], s));
    _mm256_storeu_ps(st + static_cast<std::size_t>(r) * ld + 8, _mm256_mul_ps(rows[r][1], s));
  }
}

// Output rows i..i+3 (queries) x 16 head dims: sum over keys j of P[i][j] * V[j][dims], with P
// stored transposed (row j holds every query's weight for key j). `accumulate` adds to what `out`
// holds (the sums over earlier keys) instead of overwriting it.
__attribute__((target("avx2,fma"))) void weighted_sum_tile(const float* pt, int ld, int tk, const float* v, int ldv,
                                                           float* out, int ldo, int nrows, bool accumulate) {
  __m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0;
  if (accumulate) {
    // A loop, not a lambda: GCC does not give a lambda its enclosing function's target
    // attribute, so AVX intrinsics in one fail to build without -march=native.
    __m256 init[4][2];
    for (int r = 0; r < 4; ++r)
      for (int half = 0; half < 2; ++half)
        init[r][half] = r < nrows ? _mm256_loadu_ps(out + static_cast<std::size_t>(r) * ldo + 8 * half) : _mm256_setzero_ps();
    a0 = init[0][0], b0 = init[0][1], a1 = init[1][0], b1 = init[1][1];
    a2 = init[2][0], b2 = init[2][1], a3 = init[3][0], b3 = init[3][1];
  }
  for (int j = 0; j < tk; ++j) {
    const float* vr = v + static_cast<std::size_t>(j) * ldv;
    const float* p = pt + static_cast<std::size_t>(j) * ld;
    const __m256 v0 = _mm256_loadu_ps(vr), v1 = _mm256_loadu_ps(vr + 8);
    __m256 x = _mm256_broadcast_ss(p);
    a0 = _mm256_fmadd_ps(x, v0, a0), b0 = _mm256_fmadd_ps(x, v1, b0);
    x = _mm256_broadcast_ss(p + 1);
    a1 = _mm256_fmadd_ps(x, v0, a1), b1 = _mm256_fmadd_ps(x, v1, b1);
    x = _mm256_broadcast_ss(p + 2);
    a2 = _mm256_fmadd_ps(x, v0, a2), b2 = _mm256_fmadd_ps(x, v1, b2);
    x = _mm256_broadcast_ss(p + 3);
    a3 = _mm256_fmadd_ps(x, v0, a3), b3 = _mm256_fmadd_ps(x, v1, b3);
  }
  const __m256 rows[4][2] = {{a0, b0}, {a1, b1}, {a2, b2}, {a3, b3}};
  for (int r = 0; r < nrows; ++r) {
    _mm256_storeu_ps(out + static_cast<std::size_t>(r) * ldo, rows[r][0]);
    _mm256_storeu_ps(out + static_cast<std::size_t>(r) * ldo + 8, rows[r][1]);
  }
}

}  // namespace

void small_attention(const float* q, int tq, int ldq, const float* k, const float* v, int tk, int ldk, int heads,
                     int kv_heads, int hd, float* out, int ldo, std::vector<float>& scratch) {
  if (!small_attention_fits(tq, hd)) throw std::invalid_argument("small_attention: shape does not fit");
  if (tk < 1) throw std::invalid_argument("small_attention: no keys");
  const int panels = (tq + QW - 1) / QW, cols = panels * QW;
  // Scores have a column per query rounded up to whole panels (the padding queries are zero and
  // their columns are computed and ignored), and 4 spare rows so a 4-key tile never needs a branch.
  const std::size_t st_size = static_cast<std::size_t>(tk) * cols, qp_size = static_cast<std::size_t>(panels) * hd * QW;
  const std::size_t vp_size = static_cast<std::size_t>(tk) * hd;
  scratch.resize(st_size + qp_size + vp_size + static_cast<std::size_t>(hd));
  float* st = scratch.data();
  float* qp = st + st_size;
  float* vp = qp + qp_size;
  float* zero = vp + vp_size;
  std::fill(zero, zero + hd, 0.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int group = heads / kv_heads;
  for (int h = 0; h < heads; ++h) {
    const float* kh = k + (h / group) * hd;
    const float* vh = v + (h / group) * hd;
    std::fill(qp, qp + qp_size, 0.0f);
    for (int i = 0; i < tq; ++i)
      for (int d = 0; d < hd; ++d)
        qp[(static_cast<std::size_t>(i / QW) * hd + d) * QW + i % QW] = q[static_cast<std::size_t>(i) * ldq + h * hd + d];
    for (int j = 0; j < tk; j += 4) {
      // Cached keys sit a whole cache row apart and come from memory; the hardware prefetcher
      // does not follow that stride far enough ahead.
      if (j + prefetch_rows < tk)
        for (int t = 0; t < 4 && j + prefetch_rows + t < tk; ++t)
          prefetch_row(kh + static_cast<std::size_t>(j + prefetch_rows + t) * ldk, hd);
      const float* r[4];
      for (int t = 0; t < 4; ++t) r[t] = j + t < tk ? kh + static_cast<std::size_t>(j + t) * ldk : zero;
      for (int p = 0; p < panels; ++p)
        scores_tile(r[0], r[1], r[2], r[3], qp + static_cast<std::size_t>(p) * hd * QW, hd, scale,
                    st + static_cast<std::size_t>(j) * cols + p * QW, cols, std::min(4, tk - j));
    }
    softmax_columns(st, tk, cols, cols);
    // V's head columns, 16 at a time, copied key-major into one contiguous run each: read in place,
    // successive keys sit a whole cache row (a power of two) apart and evict each other from L1.
    for (int j = 0; j < tk; ++j) {
      if (j + prefetch_rows < tk) prefetch_row(vh + static_cast<std::size_t>(j + prefetch_rows) * ldk, hd);
      for (int e = 0; e < hd; e += QW)
        std::memcpy(vp + static_cast<std::size_t>(e) * tk + static_cast<std::size_t>(j) * QW,
                    vh + static_cast<std::size_t>(j) * ldk + e, sizeof(float) * QW);
    }
    // Keys in slices whose V run and weights (64 x 16 and 64 x cols floats) stay in L1 while every
    // tile passes over them; over the whole key range each tile would stream both from L2.
    for (int j0 = 0; j0 < tk; j0 += KJ) {
      const int kj = std::min(KJ, tk - j0);
      for (int e = 0; e < hd; e += QW)
        for (int i = 0; i < tq; i += 4)
          weighted_sum_tile(st + static_cast<std::size_t>(j0) * cols + i, cols, kj,
                            vp + static_cast<std::size_t>(e) * tk + static_cast<std::size_t>(j0) * QW, QW,
                            out + static_cast<std::size_t>(i) * ldo + h * hd + e, ldo, std::min(4, tq - i), j0 > 0);
    }
  }
}

#else

void small_attention(const float*, int, int, const float*, const float*, int, int, int, int, int, float*, int,
                     std::vector<float>&) {
  throw std::logic_error("small_attention: built without x86 AVX2 support");
}

#endif

}  // namespace dls::gpu::cpu
