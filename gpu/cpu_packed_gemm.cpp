#include "gpu/cpu_packed_gemm.hpp"

#include <algorithm>
#include <cstring>
#include <vector>
#include <stdexcept>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DLS_PACKED_X86 1
#endif

namespace dls::gpu::cpu {

namespace {
constexpr int NR = packed_weights::panel_cols;
// K is walked in slices of this many values so that a panel slice (kc x 24 floats, 12 KB) stays in
// L1, beside the 16 KB of X it meets, while every 4-row tile of X passes over it.
constexpr int KC = 128;
}  // namespace

packed_weights::packed_weights(const float* w, int out, int in, int ld) : out_(out), in_(in) {
  if (out <= 0 || in <= 0 || ld < in) throw std::invalid_argument("packed_weights: bad shape");
  const int panels = (out + NR - 1) / NR;
  data_.assign(static_cast<std::size_t>(panels) * in * NR, 0.0f);
  for (int j = 0; j < panels; ++j)
    for (int c = 0; c < NR && j * NR + c < out; ++c) {
      const float* src = w + static_cast<std::size_t>(j * NR + c) * ld;
      float* dst = data_.data() + static_cast<std::size_t>(j) * in * NR + c;
      for (int k = 0; k < in; ++k) dst[static_cast<std::size_t>(k) * NR] = src[k];
    }
}

#ifdef DLS_PACKED_X86

bool packed_gemm_available() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

namespace {

// One 4 x 24 tile over K values: twelve accumulators stay in registers (GCC keeps an array of
// __m256 in memory, so they are named). acc_in continues partial sums of an earlier K slice;
// acc_out receives them for a later one; otherwise the tile lands in y. The tile also prefetches
// pf_lines cache lines from pf, one every pf_every k (see matmul_packed).
__attribute__((target("avx2,fma"))) void tile4(const float* x0, const float* x1, const float* x2, const float* x3,
                                               const float* pb, int K, const float* acc_in, float* acc_out, float* y,
                                               int ldy, int nrows, int ncols, const char* pf, int pf_lines, int pf_every) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
  __m256 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
  if (acc_in) {
    c00 = _mm256_load_ps(acc_in), c01 = _mm256_load_ps(acc_in + 8), c02 = _mm256_load_ps(acc_in + 16);
    c10 = _mm256_load_ps(acc_in + 24), c11 = _mm256_load_ps(acc_in + 32), c12 = _mm256_load_ps(acc_in + 40);
    c20 = _mm256_load_ps(acc_in + 48), c21 = _mm256_load_ps(acc_in + 56), c22 = _mm256_load_ps(acc_in + 64);
    c30 = _mm256_load_ps(acc_in + 72), c31 = _mm256_load_ps(acc_in + 80), c32 = _mm256_load_ps(acc_in + 88);
  }
  for (int k = 0; k < K; ++k) {
    const float* b = pb + static_cast<std::size_t>(k) * NR;
    if (k % pf_every == 0 && k / pf_every < pf_lines) _mm_prefetch(pf + 64 * (k / pf_every), _MM_HINT_T0);
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), b2 = _mm256_loadu_ps(b + 16);
    __m256 a = _mm256_broadcast_ss(x0 + k);
    c00 = _mm256_fmadd_ps(a, b0, c00), c01 = _mm256_fmadd_ps(a, b1, c01), c02 = _mm256_fmadd_ps(a, b2, c02);
    a = _mm256_broadcast_ss(x1 + k);
    c10 = _mm256_fmadd_ps(a, b0, c10), c11 = _mm256_fmadd_ps(a, b1, c11), c12 = _mm256_fmadd_ps(a, b2, c12);
    a = _mm256_broadcast_ss(x2 + k);
    c20 = _mm256_fmadd_ps(a, b0, c20), c21 = _mm256_fmadd_ps(a, b1, c21), c22 = _mm256_fmadd_ps(a, b2, c22);
    a = _mm256_broadcast_ss(x3 + k);
    c30 = _mm256_fmadd_ps(a, b0, c30), c31 = _mm256_fmadd_ps(a, b1, c31), c32 = _mm256_fmadd_ps(a, b2, c32);
  }
  alignas(32) float tmp[4 * NR];
  float* t = acc_out ? acc_out : tmp;
  _mm256_store_ps(t, c00), _mm256_store_ps(t + 8, c01), _mm256_store_ps(t + 16, c02);
  _mm256_store_ps(t + 24, c10), _mm256_store_ps(t + 32, c11), _mm256_store_ps(t + 40, c12);
  _mm256_store_ps(t + 48, c20), _mm256_store_ps(t + 56, c21), _mm256_store_ps(t + 64, c22);
  _mm256_store_ps(t + 72, c30), _mm256_store_ps(t + 80, c31), _mm256_store_ps(t + 88, c32);
  if (!acc_out)
    for (int r = 0; r < nrows; ++r)
      std::memcpy(y + static_cast<std::size_t>(r) * ldy, t + r * NR, sizeof(float) * static_cast<std::size_t>(ncols));
}

}  // namespace

void matmul_packed(const float* x, int rows, int ldx, const packed_weights& w, float* y, int ldy) {
  if (rows < 1 || rows > packed_weights::max_rows) throw std::invalid_argument("matmul_packed: rows out of range");
  if (!packed_gemm_available()) throw std::logic_error("matmul_packed: this CPU lacks AVX2/FMA");
  const int K = w.in(), N = w.out(), panels = (N + NR - 1) / NR, tiles = (rows + 3) / 4;
  // Rows past `rows` in the last tile read zeros; their sums are computed and dropped.
  thread_local std::vector<float> zeros;
  if (zeros.size() < static_cast<std::size_t>(K)) zeros.assign(static_cast<std::size_t>(K), 0.0f);
  alignas(32) float partial[packed_weights::max_rows / 4][4 * NR];
  // The weights of a whole model do not stay in cache between steps, so every panel slice comes
  // from memory once, and all of it on the first tile that touches it, where the hardware
  // prefetcher cannot keep up. Each tile therefore prefetches its share of the next slice (the
  // packing puts it right after this one), evenly over its k loop: issued in a burst, the misses
  // overflow the core's miss buffers and stall the loop as a demand miss would.
  const int slice_lines = KC * NR * static_cast<int>(sizeof(float)) / 64, share = (slice_lines + tiles - 1) / tiles;
  const char* end = reinterpret_cast<const char*>(w.panel(0)) + w.bytes();
  for (int j = 0; j < panels; ++j) {
    const float* pb = w.panel(j);
    const int ncols = std::min(NR, N - j * NR);
    for (int k0 = 0; k0 < K; k0 += KC) {
      const int kc = std::min(KC, K - k0);
      const bool last = k0 + kc >= K;
      const char* next = reinterpret_cast<const char*>(pb + static_cast<std::size_t>(k0 + kc) * NR);
      const int next_lines = static_cast<int>(std::min<std::ptrdiff_t>(slice_lines, (end - next) / 64));
      for (int t = 0; t < tiles; ++t) {
        const int first = t * share, lines = std::max(0, std::min(share, next_lines - first));
        const int m = 4 * t;
        const float* r[4];
        for (int i = 0; i < 4; ++i)
          r[i] = (m + i < rows ? x + static_cast<std::size_t>(m + i) * ldx : zeros.data()) + k0;
        tile4(r[0], r[1], r[2], r[3], pb + static_cast<std::size_t>(k0) * NR, kc, k0 ? partial[t] : nullptr,
              last ? nullptr : partial[t], y + static_cast<std::size_t>(m) * ldy + j * NR, ldy, std::min(4, rows - m),
              ncols, lines > 0 ? next + static_cast<std::size_t>(first) * 64 : nullptr, lines,
              std::max(1, kc / std::max(1, lines)));
      }
    }
  }
}

#else

bool packed_gemm_available() { return false; }

void matmul_packed(const float*, int, int, const packed_weights&, float*, int) {
  throw std::logic_error("matmul_packed: built without x86 AVX2 support");
}

#endif

}  // namespace dls::gpu::cpu
