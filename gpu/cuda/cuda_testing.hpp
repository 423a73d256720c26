#pragma once
// Host-side entry points to the CUDA backend's kernels, one call each, for kernel parity tests
// against the CPU kernels and for the benchmark's peak measurements. Inputs are f32 on the
// host; where the backend stores bf16, inputs are rounded to bf16 on upload and outputs are
// the bf16 values the backend would pass on, widened to f32. Plain C++ (no CUDA types).
#include "gpu/cuda/cuda_backend.hpp"
#include "gpu/model_config.hpp"

#include <cstdint>
#include <vector>

namespace dls::gpu::cuda_testing {

/// The benchmarks' --small shape: LLaDA's layout at d 512, 4 layers, vocab 4,096, for a quick
/// smoke test of a harness.
inline model_config small_bench_config() {
  model_config cfg = llada_8b_config();
  cfg.d_model = 512;
  cfg.n_layers = 4;
  cfg.n_heads = 4;
  cfg.n_kv_heads = 4;
  cfg.mlp_hidden = 1536;
  cfg.vocab_size = 4096;
  cfg.mask_id = 4000;
  cfg.eos_id = 4001;
  return cfg;
}

/// y = bf16(rmsnorm(x + add) * w); `add` may be empty. Also returns x + add in `sum` if given.
std::vector<float> rmsnorm(int device, const std::vector<float>& x, const std::vector<float>& add,
                           const std::vector<float>& w, int rows, int d, float eps, std::vector<float>* sum = nullptr);

/// Y[rows, out] = X W^T through cuBLAS, X and W rounded to bf16, fp32 accumulation and output.
std::vector<float> gemm_xwt(int device, const std::vector<float>& x, int rows, int in, const std::vector<float>& w,
                            int out);

/// The backend's fused RoPE + KV-scatter kernel for one request whose query rows are
/// positions[0..rows): returns rotated q (bf16), and fills rotated k and copied v (bf16) as
/// they land in the cache.
struct rope_result {
  std::vector<float> q, k, v;
};
rope_result rope(int device, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                 const std::vector<int32_t>& positions, int heads, int kv_heads, int hd, float theta);

/// Attention of several requests in one launch: request i has tq[i] query rows (stacked in
/// `q`, [sum tq, heads*hd]) and tk[i] cached key/value rows (k[i], v[i]: [tk, kv_heads*hd]).
/// Returns [sum tq, heads*hd]. splits = 0 lets the backend choose.
std::vector<float> attention(int device, const std::vector<float>& q, const std::vector<int>& tq,
                             const std::vector<std::vector<float>>& k, const std::vector<std::vector<float>>& v,
                             const std::vector<int>& tk, int heads, int kv_heads, int hd, cuda_attention impl,
                             int splits);

/// a = bf16(silu(g) * u) with g and u rounded to bf16 first.
std::vector<float> swiglu(int device, const std::vector<float>& g, const std::vector<float>& u);

/// The fused softmax-max-argmax over `n` logits per row: token (after optional Gumbel noise of
/// scale `temperature`, counter `counter`, canvas row rows[j]) and its probability under
/// softmax(l / score_temperature) (1: the clean softmax, LLaDA's score; T: Dream's).
struct proposal {
  int32_t token;
  double confidence;
};
std::vector<proposal> propose(int device, const std::vector<float>& logits, int n, int32_t suppressed,
                              double temperature, uint64_t seed, uint64_t counter, const std::vector<int32_t>& rows,
                              double score_temperature = 1.0);

/// Best measured dense bf16 GEMM throughput (FLOP/s) of an n x n x n cuBLAS GEMM with fp32
/// accumulation, the same call the backend uses.
double measure_gemm_bf16_flops(int device, int n = 8192, int reps = 20);

/// Seconds (best of `reps`) of one attention launch: `items` requests of q_rows query rows
/// against k_rows cached keys each, random bf16 data, splits as the backend chooses them.
double time_attention(int device, int items, int q_rows, int k_rows, int heads, int kv_heads, int hd,
                      cuda_attention impl, int max_splits = 16, int reps = 10);

/// Best measured device-to-device cudaMemcpy bandwidth, counting read + write (2 x bytes per
/// copy, as CUDA's bandwidthTest does), in bytes/s.
double measure_copy_bytes_per_s(int device, std::size_t bytes = std::size_t{1} << 30, int reps = 20);

}  // namespace dls::gpu::cuda_testing
