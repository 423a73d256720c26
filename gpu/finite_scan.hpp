#pragma once
// A scan of weights for NaN and Inf at load time: a checkpoint holding them loads fine but
// makes every request fail later, far from the cause, so the loader refuses it up front.
#include <cstddef>
#include <cstdint>

namespace dls::gpu {

/// Index of the first value in p[0, n) that is NaN or ±Inf, or -1 when all are finite.
int64_t first_non_finite(const float* p, std::size_t n);

}  // namespace dls::gpu
