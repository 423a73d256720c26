#include "gpu/cpu_kernels.hpp"

#include "gpu/cpu_small_attention.hpp"
#include "gpu/cpu_softmax.hpp"
#include "gpu/noise_hash.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace dls::gpu::cpu {

void pin_blas_threads() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void matmul_xwt(const float* x, int rows, int in, int ldx, const float* w, int out, int ldw, float* y, int ldy) {
  if (rows == 0 || out == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, x, ldx, w, ldw, 0.0f, y, ldy);
}

// Bytes of f32 one panel of converted bf16 weights takes: large enough that OpenBLAS runs a
// refresh's many rows at its large-N rate (256 output rows at d 4096), small enough to stay in L2/L3.
constexpr std::size_t bf16_panel_bytes = std::size_t{4} << 20;

void matmul_xwt_bf16(const float* x, int rows, int in, int ldx, const uint16_t* w, int out, int ldw, float* y,
                     int ldy) {
  if (rows == 0 || out == 0) return;
  thread_local std::vector<float> panel;
  const int step = std::max(1, static_cast<int>(bf16_panel_bytes / sizeof(float) / static_cast<std::size_t>(in)));
  panel.resize(static_cast<std::size_t>(std::min(step, out)) * static_cast<std::size_t>(in));
  for (int o0 = 0; o0 < out; o0 += step) {
    const int n = std::min(step, out - o0);
    for (int r = 0; r < n; ++r)
      bf16_to_f32_row(w + static_cast<std::size_t>(o0 + r) * ldw, panel.data() + static_cast<std::size_t>(r) * in,
                      static_cast<std::size_t>(in));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, in, 1.0f, x, ldx, panel.data(), in, 0.0f, y + o0,
                ldy);
  }
}

void bf16_to_f32_row(const uint16_t* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(dst + i, &bits, sizeof(float));
  }
}

void add_bias(float* y, int rows, int n, int ld, const float* bias) {
  for (int r = 0; r < rows; ++r) {
    float* yr = y + static_cast<std::size_t>(r) * ld;
    for (int i = 0; i < n; ++i) yr[i] += bias[i];
  }
}

void rmsnorm(const float* x, const float* w, float* y, int rows, int d, float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<std::size_t>(r) * d;
    float* yr = y + static_cast<std::size_t>(r) * d;
    float ss = 0.0f;
    for (int i = 0; i < d; ++i) ss += xr[i] * xr[i];
    float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
    for (int i = 0; i < d; ++i) yr[i] = xr[i] * inv * w[i];
  }
}

void rope(float* x, const int32_t* positions, int rows, int heads, int hd, int ld, float theta) {
  const int half = hd / 2;
  std::vector<float> inv(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i)
    inv[static_cast<std::size_t>(i)] =
        static_cast<float>(1.0 / std::pow(static_cast<double>(theta), (2.0 * i) / static_cast<double>(hd)));
  std::vector<float> c(static_cast<std::size_t>(half)), s(static_cast<std::size_t>(half));
  for (int r = 0; r < rows; ++r) {
    const float p = static_cast<float>(positions[r]);
    for (int i = 0; i < half; ++i) {
      float a = p * inv[static_cast<std::size_t>(i)];
      c[static_cast<std::size_t>(i)] = std::cos(a);
      s[static_cast<std::size_t>(i)] = std::sin(a);
    }
    float* xr = x + static_cast<std::size_t>(r) * ld;
    for (int h = 0; h < heads; ++h) {
      float* v = xr + h * hd;
      for (int i = 0; i < half; ++i) {
        float a = v[i], b = v[i + half];
        v[i] = a * c[static_cast<std::size_t>(i)] - b * s[static_cast<std::size_t>(i)];
        v[i + half] = b * c[static_cast<std::size_t>(i)] + a * s[static_cast<std::size_t>(i)];
      }
    }
  }
}

void attention(const float* q, int tq, int ldq, const float* k, const float* v, int tk, int ldk, int heads,
               int kv_heads, int hd, float* out, int ldo, std::vector<float>& scratch) {
  if (tq == 0) return;
  if (small_attention_fits(tq, hd)) {
    small_attention(q, tq, ldq, k, v, tk, ldk, heads, kv_heads, hd, out, ldo, scratch);
    return;
  }
  scratch.resize(static_cast<std::size_t>(tq) * static_cast<std::size_t>(tk));
  float* sc = scratch.data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int group = heads / kv_heads;
  for (int h = 0; h < heads; ++h) {
    const int kh = h / group;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, tq, tk, hd, scale, q + h * hd, ldq, k + kh * hd, ldk, 0.0f,
                sc, tk);
    softmax_rows(sc, tq, tk, tk);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, tq, hd, tk, 1.0f, sc, tk, v + kh * hd, ldk, 0.0f,
                out + h * hd, ldo);
  }
}

void swiglu(float* gate, const float* up, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

double gumbel_noise(uint64_t seed, uint64_t counter, int32_t row, int32_t token) {
  return -std::log(-std::log(noise_uniform(seed, counter, row, token)));
}

namespace {

// sample_tokens adds this inside the log of its entropy, so probabilities far below it weigh
// less than p log p would give them.
constexpr double dream_entropy_eps = 1e-10;

// Dream's scores over probs = softmax(l / t) of the candidates `each` visits (its filtered
// logits), in double. l_tok is the chosen token's logit, l1 >= l2 the two largest (l2 may be
// -inf: one candidate).
template <class Each>
double dream_score(Each each, double maxl, double t, proposal_score kind, double l_tok, double l1, double l2) {
  double z = 0.0;
  each([&](double l) { z += std::exp((l - maxl) / t); });
  if (kind == proposal_score::neg_entropy) {
    double acc = 0.0;
    each([&](double l) {
      const double p = std::exp((l - maxl) / t) / z;
      acc += p * std::log(p + dream_entropy_eps);
    });
    return acc;
  }
  if (kind == proposal_score::margin) return (std::exp((l1 - maxl) / t) - std::exp((l2 - maxl) / t)) / z;
  return std::exp((l_tok - maxl) / t) / z;
}

// The two largest clean logits other than `suppressed` (the second -inf with one candidate):
// the argmax of a proposal may carry noise, the margin never does.
std::pair<float, float> top_two(const float* logits, int n, int32_t suppressed) {
  float l1 = -std::numeric_limits<float>::infinity(), l2 = l1;
  for (int i = 0; i < n; ++i) {
    if (i == suppressed) continue;
    if (logits[i] > l1) {
      l2 = l1;
      l1 = logits[i];
    } else if (logits[i] > l2) {
      l2 = logits[i];
    }
  }
  return {l1, l2};
}

}  // namespace

argmax_result propose(const float* logits, int n, int32_t suppressed, double noise_scale, uint64_t seed,
                      uint64_t counter, int32_t row, proposal_score score_kind, sampler_family family) {
  int32_t best = -1;
  double best_score = -std::numeric_limits<double>::infinity();
  float maxl = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) {
    if (i == suppressed) continue;
    maxl = std::max(maxl, logits[i]);
    double score = logits[i];
    if (noise_scale > 0) score += noise_scale * gumbel_noise(seed, counter, row, i);
    if (score > best_score) {
      best_score = score;
      best = i;
    }
  }
  const double st = score_temperature(family, noise_scale);
  if (family == sampler_family::dream && (st != 1.0 || score_kind == proposal_score::neg_entropy)) {
    const auto [l1, l2] = top_two(logits, n, suppressed);
    auto each = [&](auto&& f) {
      for (int i = 0; i < n; ++i)
        if (i != suppressed) f(static_cast<double>(logits[i]));
    };
    return {best, dream_score(each, maxl, st, score_kind, logits[best], l1, l2)};
  }
  double sum = sum_exp_shifted(logits, n, maxl, suppressed);
  if (score_kind == proposal_score::margin) {
    const auto [l1, l2] = top_two(logits, n, suppressed);
    const double p1 = std::exp(static_cast<double>(l1) - maxl) / sum;
    const double p2 = std::isinf(l2) ? 0.0 : std::exp(static_cast<double>(l2) - maxl) / sum;
    return {best, p1 - p2};
  }
  if (score_kind == proposal_score::neg_entropy) {
    // sum p log p with p = e^(l - m) / Z: sum p (l - m) - log Z.
    double acc = 0.0;
    for (int i = 0; i < n; ++i) {
      if (i == suppressed) continue;
      const double z = static_cast<double>(logits[i]) - maxl;
      acc += std::exp(z) * z;
    }
    return {best, acc / sum - std::log(sum)};
  }
  double conf = std::exp(static_cast<double>(logits[best]) - maxl) / sum;
  return {best, conf};
}

argmax_result propose_truncated(const float* logits, int n, int32_t suppressed, double temperature, uint64_t seed,
                                uint64_t counter, int32_t row, proposal_score score_kind, double top_p, int top_k,
                                sampler_family family) {
  // Dream's order of the candidates: logits descending; ties go to the lower id, as in propose().
  auto before = [logits](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; };
  std::vector<int32_t> order;
  order.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    if (i != suppressed) order.push_back(i);
  if (order.empty()) throw std::invalid_argument("propose: no token besides the mask token");
  // Sorted lazily: a nucleus or a top-k is usually a small head of a large vocabulary.
  std::size_t sorted = 0;
  auto sort_to = [&](std::size_t m) {
    m = std::min(m, order.size());
    if (m <= sorted) return;
    m = std::min(order.size(), std::max(m, 2 * sorted + 64));
    std::partial_sort(order.begin() + static_cast<std::ptrdiff_t>(sorted), order.begin() + static_cast<std::ptrdiff_t>(m),
                      order.end(), before);
    sorted = m;
  };
  sort_to(1);
  const double maxl = logits[order[0]];
  std::size_t keep = order.size();
  if (top_p < 1.0) {
    // top_p_logits: the nucleus of softmax(l / T) (T = 1 at temperature 0), the token that
    // crosses top_p included.
    const double t = temperature > 0 ? temperature : 1.0;
    double z = 0.0;
    for (auto i : order) z += std::exp((logits[i] - maxl) / t);
    double cum = 0.0;
    keep = 0;
    while (keep < order.size() && (keep == 0 || cum <= top_p)) {
      sort_to(keep + 1);
      cum += std::exp((logits[order[keep]] - maxl) / t) / z;
      ++keep;
    }
  }
  if (top_k > 0 && static_cast<std::size_t>(top_k) < keep) {
    // top_k_logits removes what is below the k-th largest logit: ties with it stay.
    sort_to(static_cast<std::size_t>(top_k));
    const float kth = logits[order[static_cast<std::size_t>(top_k) - 1]];
    std::size_t k = static_cast<std::size_t>(top_k);
    for (; k < keep; ++k) {
      sort_to(k + 1);
      if (logits[order[k]] != kth) break;
    }
    keep = k;
  }
  int32_t best = order[0];
  if (temperature > 0) {
    double best_score = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < keep; ++j) {
      const int32_t i = order[j];
      const double score = logits[i] + temperature * gumbel_noise(seed, counter, row, i);
      if (score > best_score || (score == best_score && i < best)) {
        best_score = score;
        best = i;
      }
    }
  }
  if (family == sampler_family::dream) {
    auto each = [&](auto&& f) {
      for (std::size_t j = 0; j < keep; ++j) f(static_cast<double>(logits[order[j]]));
    };
    const double l2 = keep > 1 ? logits[order[1]] : -std::numeric_limits<double>::infinity();
    return {best, dream_score(each, maxl, score_temperature(family, temperature), score_kind, logits[best], maxl, l2)};
  }
  // LLaDA's: scores over the clean distribution renormalised on the kept tokens.
  double zk = 0.0, ez = 0.0;
  for (std::size_t j = 0; j < keep; ++j) {
    const double d = static_cast<double>(logits[order[j]]) - maxl;
    const double e = std::exp(d);
    zk += e;
    ez += e * d;
  }
  if (score_kind == proposal_score::margin) {
    const double p2 = keep > 1 ? std::exp(static_cast<double>(logits[order[1]]) - maxl) / zk : 0.0;
    return {best, 1.0 / zk - p2};
  }
  if (score_kind == proposal_score::neg_entropy) return {best, ez / zk - std::log(zk)};
  return {best, std::exp(static_cast<double>(logits[best]) - maxl) / zk};
}

}  // namespace dls::gpu::cpu
