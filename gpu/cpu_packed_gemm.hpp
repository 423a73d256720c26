#pragma once
// Small-M matrix products against weights packed once at load. The reuse steps of the dual cache
// multiply a block's 32 rows (or a few blocks' rows) by every weight matrix; there OpenBLAS runs at
// about half of its large-M rate, because it repacks the whole weight matrix on every call while
// each packed weight element feeds only M multiply-adds. Packing the weights once, in panels of
// 24 output columns laid out k-major, lets a 4 x 24 register tile stream each panel from cache.
#include "gpu/cpu_huge_pages.hpp"

#include <cstddef>
#include <vector>

namespace dls::gpu::cpu {

/// W (row-major [out, in], leading dimension ld) repacked as panels of `panel_cols` output columns:
/// panel j holds, for k = 0..in-1, the 24 values W[24 j + c][k] (zero past `out`).
class packed_weights {
 public:
  static constexpr int panel_cols = 24;
  /// Rows of X one call may multiply. Past about 48 rows OpenBLAS's own blocking wins again (a
  /// pass over a whole model's weights, measured: 37 against 42 GFLOP/s at 32 rows for OpenBLAS
  /// against this kernel, 55 against 43 at 64), so the backend sends bigger steps there.
  static constexpr int max_rows = 48;

  packed_weights() = default;
  packed_weights(const float* w, int out, int in, int ld);

  int out() const { return out_; }
  int in() const { return in_; }
  bool empty() const { return data_.empty(); }
  std::size_t bytes() const { return data_.size() * sizeof(float); }
  const float* panel(int j) const { return data_.data() + static_cast<std::size_t>(j) * in_ * panel_cols; }

 private:
  int out_ = 0, in_ = 0;
  std::vector<float, huge_page_allocator<float>> data_;
};

/// Whether this CPU runs the packed kernel (AVX2 and FMA); when it does not, callers keep OpenBLAS.
bool packed_gemm_available();

/// Y[rows, out] (ld ldy) = X[rows, in] (ld ldx) * W^T for 1 <= rows <= packed_weights::max_rows.
void matmul_packed(const float* x, int rows, int ldx, const packed_weights& w, float* y, int ldy);

}  // namespace dls::gpu::cpu
