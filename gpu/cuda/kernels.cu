#include "gpu/cuda/kernels.cuh"
#include "gpu/noise_hash.hpp"

#include <mma.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cmath>
#include <stdexcept>
#include <string>

namespace dls::gpu::cuda {

namespace {

__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 to_bf(float x) { return __float2bfloat16_rn(x); }

/// Sum over a block of `blockDim.x` threads (a multiple of 32, at most 1024). `sh` holds 32
/// floats; every thread gets the result.
__device__ float block_sum(float v, float* sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nw ? sh[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  v = sh[0];
  __syncthreads();
  return v;
}

// -- embedding and norms ----------------------------------------------------------------------

__global__ void embed_kernel(const int32_t* tok, const bf16* wte, int d, float* x) {
  const std::size_t r = blockIdx.x;
  const bf16* src = wte + static_cast<std::size_t>(tok[r]) * d;
  float* dst = x + r * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) dst[i] = to_f(src[i]);
}

__global__ void add_rmsnorm_kernel(float* x, const float* y, const float* w, bf16* h, int d, float eps) {
  __shared__ float sh[32];
  const std::size_t r = blockIdx.x;
  float* xr = x + r * d;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float v = xr[i];
    if (y) {
      v += y[r * d + i];
      xr[i] = v;
    }
    ss += v * v;
  }
  ss = block_sum(ss, sh);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  bf16* hr = h + r * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) hr[i] = to_bf(xr[i] * inv * w[i]);
}

// add_rmsnorm_kernel with float4 accesses and the row held in registers (each element is read
// once, not twice): VPT float4 per thread of 256, for d % 4 == 0 and d <= 1024 * VPT.
// Measured on an H200, the scalar kernels above made the elementwise share of a long refresh
// step 20 %.
template <int VPT>
__global__ void __launch_bounds__(256) add_rmsnorm_vec_kernel(float* x, const float* y, const float* w, bf16* h,
                                                              int d, float eps) {
  __shared__ float sh[32];
  const std::size_t r = blockIdx.x;
  const int n4 = d / 4;
  float4* xr = reinterpret_cast<float4*>(x + r * d);
  const float4* yr = y ? reinterpret_cast<const float4*>(y + r * d) : nullptr;
  float4 v[VPT];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int i = static_cast<int>(threadIdx.x) + k * 256;
    if (i >= n4) continue;
    float4 a = xr[i];
    if (yr) {
      const float4 b = yr[i];
      a.x += b.x;
      a.y += b.y;
      a.z += b.z;
      a.w += b.w;
      xr[i] = a;
    }
    v[k] = a;
    ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
  }
  ss = block_sum(ss, sh);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  const float4* w4 = reinterpret_cast<const float4*>(w);
  uint2* hr = reinterpret_cast<uint2*>(h + r * d);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int i = static_cast<int>(threadIdx.x) + k * 256;
    if (i >= n4) continue;
    const float4 g = w4[i];
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v[k].x * inv * g.x, v[k].y * inv * g.y);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(v[k].z * inv * g.z, v[k].w * inv * g.w);
    hr[i] = make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
  }
}

// Normalises x + y (y nullable) of row src[j], without writing the sum back.
__global__ void gather_rmsnorm_kernel(const float* x, const float* y, const int32_t* src, const float* w, bf16* z,
                                      int d, float eps) {
  __shared__ float sh[32];
  const std::size_t off = static_cast<std::size_t>(src[blockIdx.x]) * d;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = x[off + i] + (y ? y[off + i] : 0.0f);
    ss += v * v;
  }
  ss = block_sum(ss, sh);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  bf16* zr = z + static_cast<std::size_t>(blockIdx.x) * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = x[off + i] + (y ? y[off + i] : 0.0f);
    zr[i] = to_bf(v * inv * w[i]);
  }
}

// -- RoPE + KV scatter ------------------------------------------------------------------------

__global__ void rope_scatter_kernel(const float* q, const float* k, const float* v, int ld, const int32_t* pos,
                                    const int32_t* row_item, const item_desc* items, int layer, int heads,
                                    int kv_heads, int hd, const float* inv_freq, bf16* qb, const float* bq,
                                    const float* bk, const float* bv) {
  const int r = blockIdx.x;
  const item_desc it = items[row_item[r]];
  const int half = hd / 2, qs = heads * hd, kvs = kv_heads * hd;
  const float p = static_cast<float>(pos[r]);
  const std::size_t crow = static_cast<std::size_t>(it.q0 + (r - it.q_off));
  const std::size_t layer_off = static_cast<std::size_t>(layer) * static_cast<std::size_t>(it.L) * kvs;
  bf16* kc = it.k + layer_off + crow * kvs;
  bf16* vc = it.v + layer_off + crow * kvs;
  const float* qr = q + static_cast<std::size_t>(r) * ld;
  const float* kr = k + static_cast<std::size_t>(r) * ld;
  const float* vr = v + static_cast<std::size_t>(r) * ld;
  bf16* qo = qb + static_cast<std::size_t>(r) * qs;
  // One sincos per frequency, shared by every head of the row (hd <= 256).
  __shared__ float sn[128], cs[128];
  for (int i = threadIdx.x; i < half; i += blockDim.x) sincosf(p * inv_freq[i], &sn[i], &cs[i]);
  __syncthreads();
  for (int e = threadIdx.x; e < (heads + kv_heads) * half; e += blockDim.x) {
    const bool is_q = e < heads * half;
    const int e2 = is_q ? e : e - heads * half;
    const int hh = e2 / half, i = e2 % half;
    const float s = sn[i], c = cs[i];
    const float* src = (is_q ? qr : kr) + hh * hd;
    const float* bias = is_q ? bq : bk;
    bf16* dst = (is_q ? qo : kc) + hh * hd;
    float a = src[i], b = src[i + half];
    if (bias) {
      a += bias[hh * hd + i];
      b += bias[hh * hd + i + half];
    }
    dst[i] = to_bf(a * c - b * s);
    dst[i + half] = to_bf(b * c + a * s);
  }
  for (int e = threadIdx.x; e < kvs; e += blockDim.x) vc[e] = to_bf(vr[e] + (bv ? bv[e] : 0.0f));
}

// -- attention --------------------------------------------------------------------------------

/// Writes one output element: normalised bf16 when unsplit, else the unnormalised partial.
__device__ __forceinline__ void attn_store(float o, float l, int splits, int split, int rows, int r, int ld, int col,
                                           bf16* out, float* part_o) {
  if (splits == 1) {
    out[static_cast<std::size_t>(r) * ld + col] = to_bf(l > 0.0f ? o / l : 0.0f);
  } else {
    part_o[(static_cast<std::size_t>(split) * rows + r) * ld + col] = o;
  }
}

__device__ __forceinline__ void attn_store_ml(float m, float l, int split, int rows, int r, int heads, int h,
                                              float* part_ml) {
  float* p = part_ml + ((static_cast<std::size_t>(split) * rows + r) * heads + h) * 2;
  p[0] = m;
  p[1] = l;
}

// Scalar flash attention: one thread per query row, keys streamed through shared memory in
// tiles of SBK, online softmax in fp32. Any even head dim up to MAXHD.
constexpr int SBK = 16;

template <int MAXHD>
__global__ void __launch_bounds__(attention_rows) attn_scalar_kernel(const bf16* qb, const item_desc* items,
                                                                     const tile_desc* tiles, int layer, int rows,
                                                                     int heads, int kv_heads, int hd, int splits,
                                                                     float scale, bf16* out, float* part_o,
                                                                     float* part_ml) {
  __shared__ float Ks[SBK][MAXHD];
  __shared__ float Vs[SBK][MAXHD];
  const tile_desc tile = tiles[blockIdx.x];
  const item_desc it = items[tile.item];
  const int h = blockIdx.y, split = blockIdx.z;
  const int kh = h / (heads / kv_heads);
  const int qs = heads * hd, kvs = kv_heads * hd;
  const int t = tile.t0 + static_cast<int>(threadIdx.x);
  const bool active = t < it.T;
  const int r = it.q_off + t;

  float q[MAXHD], o[MAXHD];
#pragma unroll
  for (int d = 0; d < MAXHD; ++d) {
    q[d] = (active && d < hd) ? to_f(qb[static_cast<std::size_t>(r) * qs + h * hd + d]) * scale : 0.0f;
    o[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  int kb, ke;
  key_range(it.L, splits, split, kb, ke);
  const std::size_t layer_off = static_cast<std::size_t>(layer) * static_cast<std::size_t>(it.L) * kvs;
  const bf16* K = it.k + layer_off + kh * hd;
  const bf16* V = it.v + layer_off + kh * hd;
  for (int k0 = kb; k0 < ke; k0 += SBK) {
    const int nk = min(SBK, ke - k0);
    __syncthreads();
    for (int e = threadIdx.x; e < SBK * MAXHD; e += blockDim.x) {
      const int kr = e / MAXHD, d = e % MAXHD;
      const bool ok = kr < nk && d < hd;
      Ks[kr][d] = ok ? to_f(K[static_cast<std::size_t>(k0 + kr) * kvs + d]) : 0.0f;
      Vs[kr][d] = ok ? to_f(V[static_cast<std::size_t>(k0 + kr) * kvs + d]) : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    for (int kr = 0; kr < nk; ++kr) {
      float s = 0.0f;
#pragma unroll
      for (int d = 0; d < MAXHD; ++d) s += q[d] * Ks[kr][d];
      if (s > m) {
        const float c = expf(m - s);
        l = l * c + 1.0f;
#pragma unroll
        for (int d = 0; d < MAXHD; ++d) o[d] = o[d] * c + Vs[kr][d];
        m = s;
      } else {
        const float p = expf(s - m);
        l += p;
#pragma unroll
        for (int d = 0; d < MAXHD; ++d) o[d] += p * Vs[kr][d];
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int d = 0; d < MAXHD; ++d)
    if (d < hd) attn_store(o[d], l, splits, split, rows, r, qs, h * hd + d, out, part_o);
  if (splits > 1) attn_store_ml(m, l, split, rows, r, heads, h, part_ml);
}

// Tensor-core flash attention (WMMA bf16 16x16x16, fp32 accumulation). A block of 4 warps
// takes 64 query rows of one head; warp w owns rows [16w, 16w + 16). Key/value tiles of 64
// rows stream through shared memory. S = Q K^T goes to shared memory, each pair of lanes runs
// the online softmax of one row (32 columns each), P (bf16) times V accumulates into O, which
// lives in shared memory so rows can be rescaled.
template <int HD>
struct wmma_layout {
  static constexpr int BQ = attention_rows, BK = 64;
  static constexpr int LDQ = HD + 8;  // bf16 rows of Q, K, V (multiple of 8 elements)
  static constexpr int LDS = BK + 4;  // f32 rows of S (multiple of 4)
  static constexpr int LDP = BK + 8;  // bf16 rows of P
  static constexpr int LDO = HD + 4;  // f32 rows of O
  static constexpr std::size_t q_bytes = sizeof(bf16) * BQ * LDQ;
  static constexpr std::size_t kv_bytes = sizeof(bf16) * BK * LDQ;
  static constexpr std::size_t s_bytes = sizeof(float) * BQ * LDS;
  static constexpr std::size_t p_bytes = sizeof(bf16) * BQ * LDP;
  static constexpr std::size_t o_bytes = sizeof(float) * BQ * LDO;
  static constexpr std::size_t total = q_bytes + 2 * kv_bytes + s_bytes + p_bytes + o_bytes;
  // Every region starts 128-byte aligned (WMMA needs 32), given these sizes.
  static_assert(q_bytes % 128 == 0 && kv_bytes % 128 == 0 && s_bytes % 128 == 0 && p_bytes % 128 == 0 &&
                    o_bytes % 128 == 0,
                "shared memory regions must stay 128-byte aligned");
};

template <int HD>
__global__ void __launch_bounds__(128) attn_wmma_kernel(const bf16* qb, const item_desc* items,
                                                        const tile_desc* tiles, int layer, int rows, int heads,
                                                        int kv_heads, int splits, float scale, bf16* out,
                                                        float* part_o, float* part_ml) {
  using namespace nvcuda;
  using Lay = wmma_layout<HD>;
  constexpr int BQ = Lay::BQ, BK = Lay::BK, LDQ = Lay::LDQ, LDS = Lay::LDS, LDP = Lay::LDP, LDO = Lay::LDO;
  constexpr int C8 = HD / 8;  // 16-byte chunks per row
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);
  bf16* Ks = reinterpret_cast<bf16*>(smem + Lay::q_bytes);
  bf16* Vs = reinterpret_cast<bf16*>(smem + Lay::q_bytes + Lay::kv_bytes);
  float* Ss = reinterpret_cast<float*>(smem + Lay::q_bytes + 2 * Lay::kv_bytes);
  bf16* Ps = reinterpret_cast<bf16*>(smem + Lay::q_bytes + 2 * Lay::kv_bytes + Lay::s_bytes);
  float* Os = reinterpret_cast<float*>(smem + Lay::q_bytes + 2 * Lay::kv_bytes + Lay::s_bytes + Lay::p_bytes);

  const tile_desc tile = tiles[blockIdx.x];
  const item_desc it = items[tile.item];
  const int h = blockIdx.y, split = blockIdx.z;
  const int kh = h / (heads / kv_heads);
  const int qs = heads * HD, kvs = kv_heads * HD;
  const int nq = min(BQ, it.T - tile.t0);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int qrow = lane >> 1, half = lane & 1;  // this lane's row within the warp's 16, column half
  const uint4 zero4 = make_uint4(0, 0, 0, 0);

  // Q tile (rows past the item's end are zero) and a zero O.
  const bf16* Qg = qb + static_cast<std::size_t>(it.q_off + tile.t0) * qs + h * HD;
  for (int e = tid; e < BQ * C8; e += blockDim.x) {
    const int row = e / C8, c = e % C8;
    uint4 val = zero4;
    if (row < nq) val = *reinterpret_cast<const uint4*>(Qg + static_cast<std::size_t>(row) * qs + c * 8);
    *reinterpret_cast<uint4*>(Qs + row * LDQ + c * 8) = val;
  }
  for (int e = tid; e < BQ * LDO; e += blockDim.x) Os[e] = 0.0f;
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> qa[HD / 16];
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) wmma::load_matrix_sync(qa[kk], Qs + (16 * warp) * LDQ + kk * 16, LDQ);

  float m_i = -INFINITY, l_i = 0.0f;
  int kb, ke;
  key_range(it.L, splits, split, kb, ke);
  const std::size_t layer_off = static_cast<std::size_t>(layer) * static_cast<std::size_t>(it.L) * kvs;
  const bf16* Kg = it.k + layer_off + kh * HD;
  const bf16* Vg = it.v + layer_off + kh * HD;
  float* srow = Ss + (16 * warp + qrow) * LDS;
  bf16* prow = Ps + (16 * warp + qrow) * LDP;
  float* orow = Os + (16 * warp + qrow) * LDO;

  for (int k0 = kb; k0 < ke; k0 += BK) {
    const int nk = min(BK, ke - k0);
    __syncthreads();  // every warp is done with the previous K and V tiles
    for (int e = tid; e < BK * C8; e += blockDim.x) {
      const int row = e / C8, c = e % C8;
      uint4 kv = zero4, vv = zero4;
      if (row < nk) {
        kv = *reinterpret_cast<const uint4*>(Kg + static_cast<std::size_t>(k0 + row) * kvs + c * 8);
        vv = *reinterpret_cast<const uint4*>(Vg + static_cast<std::size_t>(k0 + row) * kvs + c * 8);
      }
      *reinterpret_cast<uint4*>(Ks + row * LDQ + c * 8) = kv;
      *reinterpret_cast<uint4*>(Vs + row * LDQ + c * 8) = vv;
    }
    __syncthreads();

    // S = Q K^T for this warp's 16 rows: K stored [key][dim] is K^T in column-major order.
#pragma unroll
    for (int j = 0; j < BK / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> kf;
        wmma::load_matrix_sync(kf, Ks + (16 * j) * LDQ + kk * 16, LDQ);
        wmma::mma_sync(acc, qa[kk], kf, acc);
      }
      wmma::store_matrix_sync(Ss + (16 * warp) * LDS + 16 * j, acc, LDS, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax: lanes 2i and 2i+1 share row i, 32 columns each.
    float tmax = -INFINITY;
#pragma unroll 8
    for (int c = 0; c < 32; ++c) {
      const int col = 32 * half + c;
      if (col < nk) tmax = fmaxf(tmax, srow[col] * scale);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    const float m_new = fmaxf(m_i, tmax);  // finite: every tile has at least one key
    const float corr = expf(m_i - m_new);  // 0 on the first tile
    float psum = 0.0f;
#pragma unroll 8
    for (int c = 0; c < 32; ++c) {
      const int col = 32 * half + c;
      const bf16 p = to_bf(col < nk ? expf(srow[col] * scale - m_new) : 0.0f);
      prow[col] = p;
      psum += to_f(p);  // normalise by the weights P V actually uses
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 1);
    l_i = l_i * corr + psum;
    m_i = m_new;
    for (int d = half * (HD / 2); d < (half + 1) * (HD / 2); ++d) orow[d] *= corr;
    __syncwarp();

    // O += P V.
#pragma unroll
    for (int n = 0; n < HD / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, Os + (16 * warp) * LDO + 16 * n, LDO, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> pf;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> vf;
        wmma::load_matrix_sync(pf, Ps + (16 * warp) * LDP + 16 * kk, LDP);
        wmma::load_matrix_sync(vf, Vs + (16 * kk) * LDQ + 16 * n, LDQ);
        wmma::mma_sync(acc, pf, vf, acc);
      }
      wmma::store_matrix_sync(Os + (16 * warp) * LDO + 16 * n, acc, LDO, wmma::mem_row_major);
    }
    __syncwarp();
  }

  const int t = 16 * warp + qrow;
  if (t >= nq) return;
  const int r = it.q_off + tile.t0 + t;
  for (int d = half * (HD / 2); d < (half + 1) * (HD / 2); ++d)
    attn_store(orow[d], l_i, splits, split, rows, r, qs, h * HD + d, out, part_o);
  if (splits > 1 && half == 0) attn_store_ml(m_i, l_i, split, rows, r, heads, h, part_ml);
}

__global__ void attn_combine_kernel(const float* part_o, const float* part_ml, int rows, int heads, int hd,
                                    int splits, bf16* out) {
  const int r = blockIdx.x, h = blockIdx.y;
  const std::size_t ld = static_cast<std::size_t>(heads) * hd;
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s)
    mx = fmaxf(mx, part_ml[((static_cast<std::size_t>(s) * rows + r) * heads + h) * 2]);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float l = 0.0f, o = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float* ml = part_ml + ((static_cast<std::size_t>(s) * rows + r) * heads + h) * 2;
      if (ml[0] == -INFINITY) continue;  // an empty key range
      const float w = expf(ml[0] - mx);
      l += w * ml[1];
      o += w * part_o[(static_cast<std::size_t>(s) * rows + r) * ld + static_cast<std::size_t>(h) * hd + d];
    }
    out[static_cast<std::size_t>(r) * ld + static_cast<std::size_t>(h) * hd + d] = to_bf(l > 0.0f ? o / l : 0.0f);
  }
}

// -- MLP, proposals, init ---------------------------------------------------------------------

__global__ void swiglu_kernel(const bf16* g, int ldg, const bf16* u, int ldu, bf16* a, int lda, int cols,
                              std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t r = i / static_cast<std::size_t>(cols), j = i % static_cast<std::size_t>(cols);
    const float x = to_f(g[r * ldg + j]);
    a[r * lda + j] = to_bf(x / (1.0f + expf(-x)) * to_f(u[r * ldu + j]));
  }
}

// swiglu_kernel by rows, 8 columns per thread through 16-byte accesses (cols and every row
// stride a multiple of 8): no per-element 64-bit division.
__global__ void swiglu_vec_kernel(const bf16* g, int ldg, const bf16* u, int ldu, bf16* a, int lda, int rows,
                                  int cols) {
  const int c = 8 * (blockIdx.x * blockDim.x + threadIdx.x);
  if (c >= cols) return;
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const uint4 gv = *reinterpret_cast<const uint4*>(g + static_cast<std::size_t>(r) * ldg + c);
    const uint4 uv = *reinterpret_cast<const uint4*>(u + static_cast<std::size_t>(r) * ldu + c);
    const auto* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv);
    const auto* u2 = reinterpret_cast<const __nv_bfloat162*>(&uv);
    uint4 out;
    auto* o2 = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 x = __bfloat1622float2(g2[k]), y = __bfloat1622float2(u2[k]);
      o2[k] = __floats2bfloat162_rn(x.x / (1.0f + expf(-x.x)) * y.x, x.y / (1.0f + expf(-x.y)) * y.y);
    }
    *reinterpret_cast<uint4*>(a + static_cast<std::size_t>(r) * lda + c) = out;
  }
}

/// The CPU's gpu::cpu::gumbel_noise: the same shared hash (gpu/noise_hash.hpp), IEEE double logs.
__device__ double gumbel(uint64_t seed, uint64_t counter, int32_t row, int32_t token) {
  return -log(-log(noise_uniform(seed, counter, row, token)));
}

constexpr int propose_threads = 256;

__global__ void __launch_bounds__(propose_threads) propose_kernel(const float* logits, int n,
                                                                  const logit_desc* desc, proposal_dev* out) {
  __shared__ float smax[propose_threads];
  __shared__ double sbest[propose_threads];
  __shared__ int sidx[propose_threads];
  __shared__ double ssum[propose_threads];
  const logit_desc dd = desc[blockIdx.x];
  const float* l = logits + static_cast<std::size_t>(blockIdx.x) * n;
  const int t = threadIdx.x;
  float mx = -INFINITY;
  double best = -INFINITY;
  int bi = INT_MAX;
  for (int i = t; i < n; i += propose_threads) {
    if (i == dd.suppressed) continue;
    const float li = l[i];
    mx = fmaxf(mx, li);
    double sc = li;
    if (dd.temperature > 0.0) sc += dd.temperature * gumbel(dd.seed, dd.counter, dd.row, i);
    if (sc > best) {  // i grows, so the first (lowest) index wins ties within a thread
      best = sc;
      bi = i;
    }
  }
  smax[t] = mx;
  sbest[t] = best;
  sidx[t] = bi;
  __syncthreads();
  for (int s = propose_threads / 2; s > 0; s >>= 1) {
    if (t < s) {
      smax[t] = fmaxf(smax[t], smax[t + s]);
      const double b = sbest[t + s];
      const int bj = sidx[t + s];
      if (b > sbest[t] || (b == sbest[t] && bj < sidx[t])) {
        sbest[t] = b;
        sidx[t] = bj;
      }
    }
    __syncthreads();
  }
  const double m = smax[0];
  const int tok = sidx[0] == INT_MAX ? 0 : sidx[0];
  const double st = dd.score_temperature;
  double sum = 0.0;
  for (int i = t; i < n; i += propose_threads)
    if (i != dd.suppressed) sum += exp((static_cast<double>(l[i]) - m) / st);
  ssum[t] = sum;
  __syncthreads();
  for (int s = propose_threads / 2; s > 0; s >>= 1) {
    if (t < s) ssum[t] += ssum[t + s];
    __syncthreads();
  }
  if (t == 0) {
    out[blockIdx.x].token = tok;
    out[blockIdx.x].pad = 0;
    out[blockIdx.x].confidence = exp((static_cast<double>(l[tok]) - m) / st) / ssum[0];
  }
}

__global__ void fill_uniform_bf16_kernel(bf16* p, std::size_t n, uint64_t seed, float scale) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    p[i] = to_bf(scale * (2.0f * u - 1.0f));
  }
}

__global__ void fill_f32_kernel(float* p, std::size_t n, float value) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p[i] = value;
}

unsigned grid_for(std::size_t n, unsigned threads) {
  return static_cast<unsigned>(std::min<std::size_t>((n + threads - 1) / threads, 65535u * 8u));
}

template <int HD>
void launch_wmma(const bf16* qb, const item_desc* items, const tile_desc* tiles, int n_tiles, int layer, int rows,
                 int heads, int kv_heads, int splits, float scale, bf16* out, float* part_o, float* part_ml,
                 cudaStream_t s) {
  constexpr std::size_t bytes = wmma_layout<HD>::total;
  allow_dynamic_smem(reinterpret_cast<const void*>(&attn_wmma_kernel<HD>), bytes);
  dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(heads), static_cast<unsigned>(splits));
  attn_wmma_kernel<HD><<<grid, 128, bytes, s>>>(qb, items, tiles, layer, rows, heads, kv_heads, splits, scale, out,
                                                part_o, part_ml);
  DLS_LAUNCHED("attn_wmma_kernel");
}

template <int MAXHD>
void launch_scalar(const bf16* qb, const item_desc* items, const tile_desc* tiles, int n_tiles, int layer, int rows,
                   int heads, int kv_heads, int hd, int splits, float scale, bf16* out, float* part_o,
                   float* part_ml, cudaStream_t s) {
  dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(heads), static_cast<unsigned>(splits));
  attn_scalar_kernel<MAXHD><<<grid, attention_rows, 0, s>>>(qb, items, tiles, layer, rows, heads, kv_heads, hd,
                                                            splits, scale, out, part_o, part_ml);
  DLS_LAUNCHED("attn_scalar_kernel");
}

}  // namespace

attention_impl resolve_attention(cuda_attention want, int hd) {
  attention_impl impl = attention_impl::scalar;
  switch (want) {
    case cuda_attention::automatic:
      impl = mma_head_dim(hd) ? attention_impl::mma
             : tensor_core_head_dim(hd) ? attention_impl::tensor_core
                                        : attention_impl::scalar;
      break;
    case cuda_attention::mma: impl = attention_impl::mma; break;
    case cuda_attention::tensor_core: impl = attention_impl::tensor_core; break;
    case cuda_attention::scalar: impl = attention_impl::scalar; break;
  }
  if (impl == attention_impl::mma && !mma_head_dim(hd))
    throw std::invalid_argument("mma attention needs head dim 32, 64, 96 or 128, not " + std::to_string(hd));
  if (impl == attention_impl::tensor_core && !tensor_core_head_dim(hd))
    throw std::invalid_argument("tensor-core attention needs head dim 32, 64 or 128, not " + std::to_string(hd));
  if (!scalar_head_dim(hd))
    throw std::invalid_argument("the CUDA backend supports even head dims up to 256, not " + std::to_string(hd));
  return impl;
}

bool tensor_core_head_dim(int hd) { return hd == 32 || hd == 64 || hd == 128; }
bool scalar_head_dim(int hd) { return hd > 0 && hd % 2 == 0 && hd <= 256; }

void embed(const int32_t* tok, int rows, const bf16* wte, int d, float* x, cudaStream_t s) {
  if (rows == 0) return;
  embed_kernel<<<rows, 256, 0, s>>>(tok, wte, d, x);
  DLS_LAUNCHED("embed_kernel");
}

void add_rmsnorm(float* x, const float* y, const float* w, bf16* h, int rows, int d, float eps, cudaStream_t s) {
  if (rows == 0) return;
  if (d % 4 == 0 && d <= 8192) {
    const int vpt = (d / 4 + 255) / 256;
    if (vpt <= 1) add_rmsnorm_vec_kernel<1><<<rows, 256, 0, s>>>(x, y, w, h, d, eps);
    else if (vpt <= 2) add_rmsnorm_vec_kernel<2><<<rows, 256, 0, s>>>(x, y, w, h, d, eps);
    else if (vpt <= 4) add_rmsnorm_vec_kernel<4><<<rows, 256, 0, s>>>(x, y, w, h, d, eps);
    else add_rmsnorm_vec_kernel<8><<<rows, 256, 0, s>>>(x, y, w, h, d, eps);
    DLS_LAUNCHED("add_rmsnorm_vec_kernel");
    return;
  }
  add_rmsnorm_kernel<<<rows, 256, 0, s>>>(x, y, w, h, d, eps);
  DLS_LAUNCHED("add_rmsnorm_kernel");
}

void gather_rmsnorm(const float* x, const float* y, const int32_t* src, int rows, const float* w, bf16* z, int d,
                    float eps, cudaStream_t s) {
  if (rows == 0) return;
  gather_rmsnorm_kernel<<<rows, 256, 0, s>>>(x, y, src, w, z, d, eps);
  DLS_LAUNCHED("gather_rmsnorm_kernel");
}

void rope_scatter(const float* q, const float* k, const float* v, int ld, const int32_t* pos, const int32_t* row_item,
                  const item_desc* items, int layer, int rows, int heads, int kv_heads, int hd, const float* inv_freq,
                  bf16* qb, cudaStream_t s, const float* bq, const float* bk, const float* bv) {
  if (rows == 0) return;
  if (hd > 256) throw cuda_error("rope_scatter: head dim " + std::to_string(hd) + " exceeds 256");
  rope_scatter_kernel<<<rows, 256, 0, s>>>(q, k, v, ld, pos, row_item, items, layer, heads, kv_heads, hd, inv_freq,
                                           qb, bq, bk, bv);
  DLS_LAUNCHED("rope_scatter_kernel");
}

int attention_tile_rows(attention_impl impl, int max_query_rows) {
  return impl == attention_impl::mma && max_query_rows <= 32 ? 32 : attention_rows;
}

void attention(const bf16* qb, const item_desc* items, const tile_desc* tiles, int n_tiles, int tile_rows, int layer,
               int rows, int heads, int kv_heads, int hd, int splits, attention_impl impl, float* part_o,
               float* part_ml, bf16* out, cudaStream_t s) {
  if (n_tiles == 0) return;
  if (splits < 1) splits = 1;
  if (impl != attention_impl::mma && tile_rows != attention_rows)
    throw cuda_error("attention: only the mma kernel takes tiles of " + std::to_string(tile_rows) + " rows");
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  if (impl == attention_impl::mma) {
    attention_mma(qb, items, tiles, n_tiles, tile_rows, layer, rows, heads, kv_heads, hd, splits, part_o, part_ml,
                  out, s);
  } else if (impl == attention_impl::tensor_core) {
    switch (hd) {
      case 32: launch_wmma<32>(qb, items, tiles, n_tiles, layer, rows, heads, kv_heads, splits, scale, out, part_o, part_ml, s); break;
      case 64: launch_wmma<64>(qb, items, tiles, n_tiles, layer, rows, heads, kv_heads, splits, scale, out, part_o, part_ml, s); break;
      case 128: launch_wmma<128>(qb, items, tiles, n_tiles, layer, rows, heads, kv_heads, splits, scale, out, part_o, part_ml, s); break;
      default: throw cuda_error("tensor-core attention does not support head dim " + std::to_string(hd));
    }
  } else {
    if (hd <= 32)
      launch_scalar<32>(qb, items, tiles, n_tiles, layer, rows, heads, kv_heads, hd, splits, scale, out, part_o, part_ml, s);
    else if (hd <= 64)
      launch_scalar<64>(qb, items, tiles, n_tiles, layer, rows, heads, kv_heads, hd, splits, scale, out, part_o, part_ml, s);
    else if (hd <= 128)
      launch_scalar<128>(qb, items, tiles, n_tiles, layer, rows, heads, kv_heads, hd, splits, scale, out, part_o, part_ml, s);
    else if (hd <= 256)
      launch_scalar<256>(qb, items, tiles, n_tiles, layer, rows, heads, kv_heads, hd, splits, scale, out, part_o, part_ml, s);
    else
      throw cuda_error("scalar attention does not support head dim " + std::to_string(hd));
  }
  if (splits > 1) {
    dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(heads));
    attn_combine_kernel<<<grid, static_cast<unsigned>(std::min(hd, 256)), 0, s>>>(part_o, part_ml, rows, heads, hd,
                                                                                  splits, out);
    DLS_LAUNCHED("attn_combine_kernel");
  }
}

void gemm_xwt(cublasHandle_t blas, const bf16* x, int rows, int in, int ldx, const bf16* w, int out, int ldw, void* y,
              cudaDataType yt, int ldy, bool accumulate) {
  if (rows == 0 || out == 0) return;
  // Column-major cuBLAS sees row-major W as W^T and Y as Y^T: Y^T = op_T(W^T) X^T.
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  DLS_CUDA(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha, w, CUDA_R_16BF, ldw, x, CUDA_R_16BF,
                        ldx, &beta, y, yt, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

int choose_kv_splits(int n_tiles, int tile_rows, int heads, int max_l, int sm_count, int max_splits) {
  if (max_splits <= 1 || n_tiles == 0) return 1;
  const int blocks = n_tiles * heads;
  // Short query sets (32-row tiles: reuse steps) stream the KV cache and need many small blocks
  // to keep loads in flight: four per SM. Full tiles compute: two per SM, since splitting them
  // measured slower on an H200 (a 768-row refresh's attention 1.95 -> 3.10 ms at four).
  const int target = (tile_rows <= 32 ? 4 : 2) * std::max(1, sm_count);
  if (blocks >= target) return 1;
  const int want = (target + blocks - 1) / blocks;
  const int by_len = std::max(1, max_l / 256);
  return std::max(1, std::min({want, by_len, max_splits}));
}

void swiglu(const bf16* g, int ldg, const bf16* u, int ldu, bf16* a, int lda, int rows, int cols, cudaStream_t s) {
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  if (n == 0) return;
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  if (cols % 8 == 0 && ldg % 8 == 0 && ldu % 8 == 0 && lda % 8 == 0 && aligned(g) && aligned(u) && aligned(a)) {
    dim3 grid(static_cast<unsigned>((cols / 8 + 255) / 256), static_cast<unsigned>(std::min(rows, 65535)));
    swiglu_vec_kernel<<<grid, 256, 0, s>>>(g, ldg, u, ldu, a, lda, rows, cols);
    DLS_LAUNCHED("swiglu_vec_kernel");
    return;
  }
  swiglu_kernel<<<grid_for(n, 256), 256, 0, s>>>(g, ldg, u, ldu, a, lda, cols, n);
  DLS_LAUNCHED("swiglu_kernel");
}

void propose(const float* logits, int rows, int n, const logit_desc* desc, proposal_dev* out, cudaStream_t s) {
  if (rows == 0) return;
  propose_kernel<<<rows, propose_threads, 0, s>>>(logits, n, desc, out);
  DLS_LAUNCHED("propose_kernel");
}

void fill_uniform_bf16(bf16* p, std::size_t n, uint64_t seed, float scale, cudaStream_t s) {
  if (n == 0) return;
  fill_uniform_bf16_kernel<<<grid_for(n, 256), 256, 0, s>>>(p, n, seed, scale);
  DLS_LAUNCHED("fill_uniform_bf16_kernel");
}

void fill_f32(float* p, std::size_t n, float value, cudaStream_t s) {
  if (n == 0) return;
  fill_f32_kernel<<<grid_for(n, 256), 256, 0, s>>>(p, n, value);
  DLS_LAUNCHED("fill_f32_kernel");
}

}  // namespace dls::gpu::cuda
