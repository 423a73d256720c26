// Flash attention on mma.sync tensor-core instructions (FlashAttention-2 style), the default
// attention kernel for head dims 32, 64, 96 and 128.
//
// Why not WMMA: a WMMA accumulator's element layout is unspecified, so the WMMA kernel
// (kernels.cu) must take S and O through shared memory to rescale rows; measured on an H200 it
// made long refresh steps 2-3x slower than their roofline. With mma.m16n8k16 the PTX ISA fixes
// the fragment layouts, so S, P and O stay in registers: a thread holds two query rows (g and
// g + 8 of its warp's 16) and, per 8-column tile, two adjacent columns of each; the
// accumulator layout of S is exactly the A-operand layout P needs for P V.
//
// A block: 4 warps and 64 query rows (2 and 32 for short query sets) of one (tile, head, key
// split). Key/value tiles of 64 rows
// are double-buffered in shared memory with cp.async; ldmatrix feeds K (and, transposed, V)
// to the MMAs. Softmax runs in base 2 on scores pre-multiplied by log2(e) / sqrt(hd).
#include "gpu/cuda/kernels.cuh"

#include <cmath>
#include <mutex>
#include <set>
#include <utility>

namespace dls::gpu::cuda {

namespace {

constexpr int BK = 64;  // keys per shared-memory tile
constexpr float ln2 = 0.69314718055994531f;

template <int HD>
struct mma_layout {
  static_assert(HD % 32 == 0 && HD >= 32 && HD <= 128, "head dim must be 32, 64, 96 or 128");
  // Rows padded by 16 bytes: the 8 row addresses of one ldmatrix phase land in distinct banks.
  static constexpr int LD = HD + 8;
  static constexpr std::size_t tile_elems = static_cast<std::size_t>(BK) * LD;
  static constexpr std::size_t bytes = 2 /*stages*/ * 2 /*K, V*/ * tile_elems * sizeof(bf16);
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zero-filled when !valid (no bytes are read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                              uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// d += a (16x16 bf16, row) * b (16x8 bf16, col), fp32 accumulation.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as bf16 in one register, the lower column in the low half (the fragment order).
// Also returns the rounded values, which the softmax denominator sums so that it normalises by
// exactly the weights P V uses.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi, float& sum) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  sum += __low2float(v) + __high2float(v);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ uint32_t load_u32(const bf16* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Three blocks per SM (shared memory allows three at head dim 128): the register cap this sets
// (168 at 4 warps) costs at most 8 bytes of spill, against 242 registers and two blocks free.
template <int HD, int WARPS>
__global__ void __launch_bounds__(32 * WARPS, 3) attn_mma_kernel(const bf16* qb, const item_desc* items, const tile_desc* tiles,
                                                       int layer, int rows, int heads, int kv_heads, int splits,
                                                       float scale_log2, bf16* out, float* part_o, float* part_ml) {
  using Lay = mma_layout<HD>;
  constexpr int LD = Lay::LD, C8 = HD / 8, BQ = 16 * WARPS;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem);  // [stage][BK][LD]
  bf16* Vs = Ks + 2 * Lay::tile_elems;       // [stage][BK][LD]

  const tile_desc tile = tiles[blockIdx.x];
  const item_desc it = items[tile.item];
  const int h = blockIdx.y, split = blockIdx.z;
  const int kh = h / (heads / kv_heads);
  const int qs = heads * HD, kvs = kv_heads * HD;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
  const int nq = min(BQ, it.T - tile.t0);
  const int row0 = 16 * warp + g, row1 = row0 + 8;  // this thread's rows within the tile

  // Q as A fragments, straight from global memory (rows past the item's end are zero).
  uint32_t qa[HD / 16][4];
  {
    const bf16* q0 = qb + static_cast<std::size_t>(it.q_off + tile.t0 + row0) * qs + h * HD + 2 * tig;
    const bf16* q1 = q0 + static_cast<std::size_t>(8) * qs;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      qa[kk][0] = row0 < nq ? load_u32(q0 + 16 * kk) : 0u;
      qa[kk][1] = row1 < nq ? load_u32(q1 + 16 * kk) : 0u;
      qa[kk][2] = row0 < nq ? load_u32(q0 + 16 * kk + 8) : 0u;
      qa[kk][3] = row1 < nq ? load_u32(q1 + 16 * kk + 8) : 0u;
    }
  }

  float o[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  int kb, ke;
  key_range(it.L, splits, split, kb, ke);
  const std::size_t layer_off = static_cast<std::size_t>(layer) * static_cast<std::size_t>(it.L) * kvs;
  const bf16* Kg = it.k + layer_off + kh * HD;
  const bf16* Vg = it.v + layer_off + kh * HD;
  const int n_tiles = (ke - kb + BK - 1) / BK;

  auto load_tile = [&](int stage, int k0) {
    const int nk = min(BK, ke - k0);
    bf16* ks = Ks + stage * Lay::tile_elems;
    bf16* vs = Vs + stage * Lay::tile_elems;
    for (int e = tid; e < BK * C8; e += blockDim.x) {
      const int row = e / C8, c = e % C8;
      const bool ok = row < nk;  // rows past the range are zero: 0 * garbage could be NaN in P V
      const std::size_t off = static_cast<std::size_t>(k0 + (ok ? row : 0)) * kvs + 8 * c;
      cp_async16(smem_u32(ks + row * LD + 8 * c), Kg + off, ok);
      cp_async16(smem_u32(vs + row * LD + 8 * c), Vg + off, ok);
    }
    cp_async_commit();
  };

  // ldmatrix addressing: lanes 8i..8i+7 give the rows of matrix i.
  const int mi = lane >> 3, mr = lane & 7;

  if (n_tiles > 0) load_tile(0, kb);
  for (int t = 0; t < n_tiles; ++t) {
    const int k0 = kb + t * BK;
    if (t + 1 < n_tiles) {
      load_tile((t + 1) & 1, k0 + BK);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* ks = Ks + (t & 1) * Lay::tile_elems;
    const bf16* vs = Vs + (t & 1) * Lay::tile_elems;
    const int nk = min(BK, ke - k0);

    // S = Q K^T for this warp's 16 rows and the tile's 64 keys: 8 column tiles of 8 keys.
    float s[BK / 8][4];
#pragma unroll
    for (int j = 0; j < BK / 8; ++j) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
      for (int d0 = 0; d0 < HD; d0 += 32) {
        // Matrix i: keys 8j..8j+7, dims d0+8i..d0+8i+7; thread gets (key g, dims 2 tig, +1).
        uint32_t b0, b1, b2, b3;
        ldsm_x4(smem_u32(ks + (8 * j + mr) * LD + d0 + 8 * mi), b0, b1, b2, b3);
        mma_bf16(s[j], qa[d0 / 16], b0, b1);
        mma_bf16(s[j], qa[d0 / 16 + 1], b2, b3);
      }
    }

    // Online softmax (base 2). Columns past the range are -inf; the quad (4 lanes) shares a row.
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < BK / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool ok = 8 * j + 2 * tig + e < nk;
        s[j][e] = ok ? s[j][e] * scale_log2 : -INFINITY;
        s[j][2 + e] = ok ? s[j][2 + e] * scale_log2 : -INFINITY;
        mx0 = fmaxf(mx0, s[j][e]);
        mx1 = fmaxf(mx1, s[j][2 + e]);
      }
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);  // finite: key 0 of the tile is valid
    const float c0 = exp2f(m0 - mn0), c1 = exp2f(m1 - mn1);  // 0 on the first tile
    m0 = mn0;
    m1 = mn1;
    l0 *= c0;
    l1 *= c1;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      o[n][0] *= c0;
      o[n][1] *= c0;
      o[n][2] *= c1;
      o[n][3] *= c1;
    }

    // O += P V, 16 keys per step. P's A fragment is S's accumulator layout of column tiles
    // 2kk and 2kk + 1; V's B fragments come from ldmatrix.trans of row-major V.
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      uint32_t pa[4];
      pa[0] = pack_bf16(exp2f(s[2 * kk][0] - m0), exp2f(s[2 * kk][1] - m0), l0);
      pa[1] = pack_bf16(exp2f(s[2 * kk][2] - m1), exp2f(s[2 * kk][3] - m1), l1);
      pa[2] = pack_bf16(exp2f(s[2 * kk + 1][0] - m0), exp2f(s[2 * kk + 1][1] - m0), l0);
      pa[3] = pack_bf16(exp2f(s[2 * kk + 1][2] - m1), exp2f(s[2 * kk + 1][3] - m1), l1);
#pragma unroll
      for (int n = 0; n < HD / 8; n += 2) {
        // Matrix i: keys 16kk + 8(i & 1) + 0..7, dims 8(n + (i >> 1)) + 0..7; transposed, the
        // thread gets (keys 2 tig, +1; dim g): B fragments of column tiles n and n + 1.
        uint32_t b0, b1, b2, b3;
        ldsm_x4_trans(smem_u32(vs + (16 * kk + 8 * (mi & 1) + mr) * LD + 8 * (n + (mi >> 1))), b0, b1, b2, b3);
        mma_bf16(o[n], pa, b0, b1);
        mma_bf16(o[n + 1], pa, b2, b3);
      }
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
  }

  // Row sums over the quad, then write rows row0 and row1.
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = half ? row1 : row0;
    if (row >= nq) continue;
    const float l = half ? l1 : l0, m = half ? m1 : m0;
    const std::size_t r = static_cast<std::size_t>(it.q_off + tile.t0 + row);
    const int col0 = h * HD + 2 * tig;
    if (splits == 1) {
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(o[n][2 * half] * inv, o[n][2 * half + 1] * inv);
        *reinterpret_cast<__nv_bfloat162*>(out + r * qs + col0 + 8 * n) = v;
      }
    } else {
      float* po = part_o + (static_cast<std::size_t>(split) * rows + r) * qs + col0;
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) *reinterpret_cast<float2*>(po + 8 * n) = make_float2(o[n][2 * half], o[n][2 * half + 1]);
      if (tig == 0) {
        // The combine kernel works in natural-log units.
        float* ml = part_ml + ((static_cast<std::size_t>(split) * rows + r) * heads + h) * 2;
        ml[0] = m == -INFINITY ? -INFINITY : m * ln2;
        ml[1] = l;
      }
    }
  }
}

template <int HD, int WARPS>
void launch_warps(const bf16* qb, const item_desc* items, const tile_desc* tiles, int n_tiles, int layer, int rows,
                  int heads, int kv_heads, int splits, bf16* out, float* part_o, float* part_ml, cudaStream_t s) {
  constexpr std::size_t bytes = mma_layout<HD>::bytes;
  allow_dynamic_smem(reinterpret_cast<const void*>(&attn_mma_kernel<HD, WARPS>), bytes);
  const float scale_log2 = 1.4426950408889634f / std::sqrt(static_cast<float>(HD));
  dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(heads), static_cast<unsigned>(splits));
  attn_mma_kernel<HD, WARPS><<<grid, 32 * WARPS, bytes, s>>>(qb, items, tiles, layer, rows, heads, kv_heads, splits,
                                                             scale_log2, out, part_o, part_ml);
  DLS_LAUNCHED("attn_mma_kernel");
}

template <int HD>
void launch(const bf16* qb, const item_desc* items, const tile_desc* tiles, int n_tiles, int tile_rows, int layer,
            int rows, int heads, int kv_heads, int splits, bf16* out, float* part_o, float* part_ml, cudaStream_t s) {
  if (tile_rows == 32)
    launch_warps<HD, 2>(qb, items, tiles, n_tiles, layer, rows, heads, kv_heads, splits, out, part_o, part_ml, s);
  else if (tile_rows == 64)
    launch_warps<HD, 4>(qb, items, tiles, n_tiles, layer, rows, heads, kv_heads, splits, out, part_o, part_ml, s);
  else
    throw cuda_error("mma attention takes tiles of 32 or 64 rows, not " + std::to_string(tile_rows));
}

}  // namespace

bool mma_head_dim(int hd) { return hd == 32 || hd == 64 || hd == 96 || hd == 128; }

void attention_mma(const bf16* qb, const item_desc* items, const tile_desc* tiles, int n_tiles, int tile_rows,
                   int layer, int rows, int heads, int kv_heads, int hd, int splits, float* part_o, float* part_ml,
                   bf16* out, cudaStream_t s) {
  switch (hd) {
    case 32: launch<32>(qb, items, tiles, n_tiles, tile_rows, layer, rows, heads, kv_heads, splits, out, part_o, part_ml, s); break;
    case 64: launch<64>(qb, items, tiles, n_tiles, tile_rows, layer, rows, heads, kv_heads, splits, out, part_o, part_ml, s); break;
    case 96: launch<96>(qb, items, tiles, n_tiles, tile_rows, layer, rows, heads, kv_heads, splits, out, part_o, part_ml, s); break;
    case 128: launch<128>(qb, items, tiles, n_tiles, tile_rows, layer, rows, heads, kv_heads, splits, out, part_o, part_ml, s); break;
    default: throw cuda_error("mma attention does not support head dim " + std::to_string(hd));
  }
}

void allow_dynamic_smem(const void* kernel, std::size_t bytes) {
  // Once per kernel and device, outside any stream capture (the first launch is eager).
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> done;
  int dev = 0;
  DLS_CUDA(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lk(mu);
  if (done.count({kernel, dev})) return;
  DLS_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  done.insert({kernel, dev});
}

}  // namespace dls::gpu::cuda
