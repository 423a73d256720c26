#include "gpu/cpu_softmax.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dls::gpu::cpu {

void softmax_rows(float* x, int rows, int cols, int ld) {
  for (int r = 0; r < rows; ++r) {
    float* row = x + static_cast<std::size_t>(r) * static_cast<std::size_t>(ld);
    float m = *std::max_element(row, row + cols);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < cols; ++j) {
      row[j] = std::exp(row[j] - m);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int j = 0; j < cols; ++j) row[j] *= inv;
  }
}

void softmax_columns(float* x, int rows, int cols, int ld) {
  thread_local std::vector<float> mx, sum;
  mx.assign(static_cast<std::size_t>(cols), std::numeric_limits<float>::lowest());
  sum.assign(static_cast<std::size_t>(cols), 0.0f);
  float* m = mx.data();
  float* s = sum.data();
  for (int r = 0; r < rows; ++r) {
    const float* row = x + static_cast<std::size_t>(r) * static_cast<std::size_t>(ld);
#pragma omp simd
    for (int c = 0; c < cols; ++c) m[c] = std::max(m[c], row[c]);
  }
  for (int r = 0; r < rows; ++r) {
    float* row = x + static_cast<std::size_t>(r) * static_cast<std::size_t>(ld);
#pragma omp simd
    for (int c = 0; c < cols; ++c) {
      row[c] = std::exp(row[c] - m[c]);
      s[c] += row[c];
    }
  }
#pragma omp simd
  for (int c = 0; c < cols; ++c) s[c] = 1.0f / s[c];
  for (int r = 0; r < rows; ++r) {
    float* row = x + static_cast<std::size_t>(r) * static_cast<std::size_t>(ld);
#pragma omp simd
    for (int c = 0; c < cols; ++c) row[c] *= s[c];
  }
}

double sum_exp_shifted(const float* x, int n, float shift, int skip) {
  // Exponentials in float (vectorised), sum in double: confidences agree with a float64
  // softmax to ~1e-7 relative, far inside what the threshold comparisons can notice.
  thread_local std::vector<float> buf;
  buf.resize(static_cast<std::size_t>(n));
  float* b = buf.data();
#pragma omp simd
  for (int i = 0; i < n; ++i) b[i] = std::exp(x[i] - shift);
  double sum = 0.0;
  for (int i = 0; i < n; ++i)
    if (i != skip) sum += static_cast<double>(b[i]);
  return sum;
}

}  // namespace dls::gpu::cpu
