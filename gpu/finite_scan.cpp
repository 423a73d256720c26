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

// The largest masked exponent of p[0, N): branch-free, and with a trip count known at
// compile time so that -O2's cheap vectoriser takes it (a loop of unknown length it skips).
template <std::size_t N>
uint32_t worst_exponent(const float* p) {
  uint32_t worst = 0;
  for (std::size_t i = 0; i < N; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, sizeof bits);
    worst = std::max(worst, bits & exponent_mask);
  }
  return worst;
}

int64_t locate(const float* p, std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i)
    if (!std::isfinite(p[i])) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace

int64_t first_non_finite(const float* p, std::size_t n) {
  std::size_t start = 0;
  for (; start + chunk_values <= n; start += chunk_values)
    if (worst_exponent<chunk_values>(p + start) == exponent_mask) return locate(p, start, start + chunk_values);
  return locate(p, start, n);
}

}  // namespace dls::gpu
