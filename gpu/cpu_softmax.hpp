#pragma once
// The exponentials of attention softmax and of the proposal's confidence. They dominate a step
// after the GEMMs (L^2 x heads x layers of them in a refresh), so this one file is built with
// -ffast-math, which lets GCC call glibc's vectorised expf (libmvec, <= 4 ulp).
#include <cstddef>

namespace dls::gpu::cpu {

/// Each of `rows` rows of `cols` values (stride ld) becomes softmax(row).
void softmax_rows(float* x, int rows, int cols, int ld);

/// Each of `cols` columns of a rows x cols matrix (row stride ld) becomes softmax(column); the
/// loops run along rows so the exponentials vectorise across columns.
void softmax_columns(float* x, int rows, int cols, int ld);

/// Returns sum_i exp(x[i] - shift) over i != skip, accumulated in double.
double sum_exp_shifted(const float* x, int n, float shift, int skip);

}  // namespace dls::gpu::cpu
