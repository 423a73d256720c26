#pragma once
// Internal: the CUDA backend's kernels and their launchers. Every launcher enqueues on
// `stream` and checks the launch.
#include "gpu/cuda/common.cuh"

#include <cstdint>

namespace dls::gpu::cuda {

/// One request of a batched step. Its query rows are rows [q_off, q_off + T) of the step's
/// activations and canvas rows [q0, q0 + T); it attends to all L key rows of its cache.
/// k and v point at layer 0 of its cache: bf16 [layer][L][kv_width].
struct item_desc {
  int32_t q_off = 0, T = 0, q0 = 0, L = 0;
  bf16* k = nullptr;
  bf16* v = nullptr;
};

/// A tile of up to attention_tile_rows() query rows of one item, starting at item row t0.
struct tile_desc {
  int32_t item = 0, t0 = 0;
};
constexpr int attention_rows = 64;
/// Key ranges of a split are multiples of this.
constexpr int attention_key_granule = 64;

/// One row that needs a proposal: activation row `src`, canvas row `row`.
struct logit_desc {
  int32_t src = 0, row = 0, suppressed = 0, pad = 0;
  double temperature = 0;
  uint64_t seed = 0, counter = 0;
  // The confidence is softmax(l / score_temperature)[token]: 1 for LLaDA's clean score, T for
  // Dream's sample_tokens at T > 0 (gpu::score_temperature).
  double score_temperature = 1;
};

struct proposal_dev {
  int32_t token;
  int32_t pad;
  double confidence;
};

/// mma: the FlashAttention-2-style kernel on mma.sync (attention_mma.cu), the default;
/// tensor_core: the WMMA kernel; scalar: one thread per query row, any even head dim.
enum class attention_impl : uint8_t { mma, tensor_core, scalar };

/// The kernel a backend option selects at head dim `hd` (automatic: mma, else WMMA, else
/// scalar). Throws std::invalid_argument when the chosen kernel does not take `hd`.
attention_impl resolve_attention(cuda_attention want, int hd);
/// Whether the mma kernel supports this head dim (32, 64, 96, 128).
bool mma_head_dim(int hd);
/// Query rows per attention tile: 32 (a 2-warp mma block) when every item of the launch has at
/// most 32 query rows, as in reuse steps of 32-token blocks, so no warp idles on padding and
/// more blocks fit an SM; else attention_rows (64).
int attention_tile_rows(attention_impl impl, int max_query_rows);
/// Whether the WMMA kernel supports this head dim (32, 64, 128).
bool tensor_core_head_dim(int hd);
/// Whether the scalar kernel supports it (even, <= 256).
bool scalar_head_dim(int hd);

/// x[r] = f32(wte[tok[r]]).
void embed(const int32_t* tok, int rows, const bf16* wte, int d, float* x, cudaStream_t s);

/// If y: x += y. Then h = bf16(x * rsqrt(mean(x^2) + eps) * w), row by row.
void add_rmsnorm(float* x, const float* y, const float* w, bf16* h, int rows, int d, float eps, cudaStream_t s);

/// z[j] = bf16(rmsnorm(x[src[j]] + y[src[j]]) * w); y may be null. x is not modified.
void gather_rmsnorm(const float* x, const float* y, const int32_t* src, int rows, const float* w, bf16* z, int d,
                    float eps, cudaStream_t s);

/// RoPE (non-interleaved half split, fp32) of q into qb (bf16, [R, heads*hd]), RoPE of k and a
/// copy of v into each item's cache rows at layer `layer` (bf16). q, k, v: R rows of row stride
/// `ld` (f32; [q | k | v] column blocks of one buffer in the backend). inv_freq: hd/2 values
/// theta^(-2i/hd) as the CPU computes them. bq, bk, bv (Dream's QKV bias, this rank's slices;
/// null without) are added to q, k and v first, as the projections' bias.
void rope_scatter(const float* q, const float* k, const float* v, int ld, const int32_t* pos, const int32_t* row_item,
                  const item_desc* items, int layer, int rows, int heads, int kv_heads, int hd, const float* inv_freq,
                  bf16* qb, cudaStream_t s, const float* bq = nullptr, const float* bk = nullptr,
                  const float* bv = nullptr);

/// The key range [kb, ke) of split `split` of L keys: chunks rounded up to attention_key_granule.
__device__ __forceinline__ void key_range(int L, int splits, int split, int& kb, int& ke) {
  int chunk = (L + splits - 1) / splits;
  chunk = (chunk + attention_key_granule - 1) / attention_key_granule * attention_key_granule;
  kb = min(L, split * chunk);
  ke = min(L, kb + chunk);
}

/// Bidirectional attention of each tile's query rows against all key rows of its item's cache
/// at `layer`. qb, out: [R, heads*hd] bf16. With splits > 1 the key range is split and the
/// partial results (part_o: [splits][R][heads*hd] f32, part_ml: [splits][R][heads][2]) are
/// combined by a second kernel.
/// `tile_rows` is the tiles' row count (attention_tile_rows()).
void attention(const bf16* qb, const item_desc* items, const tile_desc* tiles, int n_tiles, int tile_rows, int layer,
               int rows, int heads, int kv_heads, int hd, int splits, attention_impl impl, float* part_o,
               float* part_ml, bf16* out, cudaStream_t s);
/// The mma kernel alone (attention() dispatches here, then combines the splits).
void attention_mma(const bf16* qb, const item_desc* items, const tile_desc* tiles, int n_tiles, int tile_rows,
                   int layer, int rows, int heads, int kv_heads, int hd, int splits, float* part_o, float* part_ml,
                   bf16* out, cudaStream_t s);
/// Raises a kernel's dynamic shared memory limit, once per kernel and device.
void allow_dynamic_smem(const void* kernel, std::size_t bytes);

/// Y[rows, out] = X[rows, in] W^T (+ Y when accumulate) with W row-major [out, in] (leading
/// dim ldw, so a shard can pass a slice of the full weight): bf16 inputs, fp32 accumulation,
/// output type `yt`.
void gemm_xwt(cublasHandle_t blas, const bf16* x, int rows, int in, int ldx, const bf16* w, int out, int ldw, void* y,
              cudaDataType yt, int ldy, bool accumulate = false);

/// Key-range splits for a launch of n_tiles x heads blocks: enough blocks for about four per
/// SM with 32-row tiles and two with 64-row tiles, at least 256 keys per split, at most
/// max_splits.
int choose_kv_splits(int n_tiles, int tile_rows, int heads, int max_l, int sm_count, int max_splits);

/// a[r][j] = bf16(silu(g[r][j]) * u[r][j]) for rows r < rows and columns j < cols, each matrix
/// with its own row stride (a may alias g).
void swiglu(const bf16* g, int ldg, const bf16* u, int ldu, bf16* a, int lda, int rows, int cols, cudaStream_t s);

/// Per row j of logits [rows, n]: token = argmax over v != suppressed of l + T * gumbel(seed,
/// counter, row, v) (lowest index on ties), confidence = its probability under
/// softmax(l / score_temperature) (double; score_temperature 1: the clean softmax).
void propose(const float* logits, int rows, int n, const logit_desc* desc, proposal_dev* out, cudaStream_t s);

/// p[i] = bf16(scale * u(seed, i)) with u uniform in [-1, 1) from a counter-based hash.
void fill_uniform_bf16(bf16* p, std::size_t n, uint64_t seed, float scale, cudaStream_t s);
void fill_f32(float* p, std::size_t n, float value, cudaStream_t s);

}  // namespace dls::gpu::cuda
