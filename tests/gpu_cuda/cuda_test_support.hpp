#pragma once
// Shared by the CUDA test suites: a main() that skips (exit 77) without enough GPUs, random
// inputs, bf16 rounding and error norms.
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/unit_test.hpp>

#include "gpu/cuda/cuda_backend.hpp"
#include "gpu/dtype.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

/// main(): CTest's SKIP_RETURN_CODE 77 when fewer than `min_devices` CUDA devices are usable.
#define DLS_CUDA_TEST_MAIN(min_devices)                                                           \
  int main(int argc, char* argv[]) {                                                              \
    const int n = dls::gpu::cuda_device_count();                                                  \
    if (n < (min_devices)) {                                                                      \
      std::printf("SKIPPED: %d usable CUDA device(s); this suite needs %d\n", n, (min_devices)); \
      return 77;                                                                                  \
    }                                                                                             \
    std::printf("CUDA device 0: %s\n", dls::gpu::cuda_device_description(0).c_str());             \
    return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);                         \
  }

namespace dls_test {

inline std::vector<float> randn(std::size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

inline std::vector<float> round_bf16(std::vector<float> v) {
  for (auto& x : v) x = dls::gpu::bf16_to_f32(dls::gpu::f32_to_bf16(x));
  return v;
}

/// ||a - b|| / ||b||.
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

/// max |a - b| / max |b|.
inline double rel_max(const std::vector<float>& a, const std::vector<float>& b) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return den > 0 ? num / den : num;
}

}  // namespace dls_test
