#pragma once
// CPU kernels of the LLaDA forward, f32. Matrix products go through OpenBLAS; the rest are
// plain loops the compiler vectorises. Tests check each against a naive reference.
#include "gpu/decode_params.hpp"
#include "gpu/model_config.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dls::gpu::cpu {

/// Pins OpenBLAS to one thread: a device slot is one core, and slots must not oversubscribe.
void pin_blas_threads();

/// Y[rows, out] (ld ldy) = X[rows, in] (ld ldx) * W^T, W row-major [out, in] with leading dim ldw.
void matmul_xwt(const float* x, int rows, int in, int ldx, const float* w, int out, int ldw, float* y, int ldy);

/// The same product against bf16 weights: W is converted to f32 a panel of output rows at a time
/// into a per-thread scratch (a few MiB), so the model never exists in f32 as a whole.
void matmul_xwt_bf16(const float* x, int rows, int in, int ldx, const uint16_t* w, int out, int ldw, float* y,
                     int ldy);

/// Converts n bf16 values to f32.
void bf16_to_f32_row(const uint16_t* src, float* dst, std::size_t n);

/// Adds bias[0, n) to each of `rows` rows of y (stride ld).
void add_bias(float* y, int rows, int n, int ld, const float* bias);

/// y = x * rsqrt(mean(x^2) + eps) * w, row by row.
void rmsnorm(const float* x, const float* w, float* y, int rows, int d, float eps);

/// Rotates pairs (i, i + hd/2) of every head of every row by position * theta^(-2i/hd)
/// (LLaDA's non-interleaved half split). `x` rows have `heads * hd` values at stride ld.
void rope(float* x, const int32_t* positions, int rows, int heads, int hd, int ld, float theta);

/// Bidirectional attention of `tq` query rows against `tk` key rows (no mask).
/// q: [tq, heads*hd] (ld ldq); k, v: [tk, kv_heads*hd] (ld ldk); out: [tq, heads*hd] (ld ldo).
/// Query head h reads kv head h / (heads / kv_heads). `scratch` grows as needed.
void attention(const float* q, int tq, int ldq, const float* k, const float* v, int tk, int ldk, int heads,
               int kv_heads, int hd, float* out, int ldo, std::vector<float>& scratch);

/// gate = silu(gate) * up, elementwise.
void swiglu(float* gate, const float* up, std::size_t n);

/// Index of the largest of `logits[0..n)` after adding `noise_scale * gumbel(seed, counter, row, v)`
/// when noise_scale > 0, skipping `suppressed`; and the clean softmax probability of it (double).
struct argmax_result {
  int32_t token;
  double confidence;
};
/// With `score` other than probability, `confidence` is instead p(top-1) - p(top-2) of the
/// family's distribution, or its negative entropy.
argmax_result propose(const float* logits, int n, int32_t suppressed, double noise_scale, uint64_t seed,
                      uint64_t counter, int32_t row, proposal_score score = proposal_score::probability,
                      sampler_family family = sampler_family::llada);

/// propose() for Dream's top_p / top_k (sample_tokens in its generation utilities): the token is
/// chosen among the candidates left by top_p_logits (the nucleus of softmax(l / T), T = 1 at
/// temperature 0) and then top_k_logits (the k largest logits and any tied with the k-th), and
/// every score is computed over the family's distribution renormalised on those candidates.
argmax_result propose_truncated(const float* logits, int n, int32_t suppressed, double temperature, uint64_t seed,
                                uint64_t counter, int32_t row, proposal_score score, double top_p, int top_k,
                                sampler_family family = sampler_family::llada);

/// A standard Gumbel variate from a counter-based hash, so sampling is reproducible across
/// backends, TP ranks and migrations without carrying generator state.
double gumbel_noise(uint64_t seed, uint64_t counter, int32_t row, int32_t token);

}  // namespace dls::gpu::cpu
