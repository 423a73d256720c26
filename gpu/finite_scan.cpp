#include "gpu/finite_scan.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace dls::gpu {

namespace {

// Values per pass: large enough for the branch-free loop to run at memory speed, small
// enough (16 KiB) that the rescan which locates a bad value stays in L1.
constexpr std::size_t chunk_values = 4096;
constexpr uint32_t exponent_mask = 0x7f800000u;  // all-ones exponent: NaN or Inf in IEEE 754 binary32

}  // namespace

int64_t first_non_finite(const float* p, std::size_t n) {
  for (std::size_t start = 0; start < n; start += chunk_values) {
    std::size_t end = std::min(n, start + chunk_values);
    // The maximum of the masked exponents vectorises; a branch per value would not.
    uint32_t worst = 0;
    for (std::size_t i = start; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, p + i, sizeof bits);
      worst = std::max(worst, bits & exponent_mask);
    }
    if (worst != exponent_mask) continue;
    for (std::size_t i = start; i < end; ++i)
      if (!std::isfinite(p[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace dls::gpu
