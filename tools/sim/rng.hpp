#pragma once
// A small deterministic generator. The standard library's distributions differ between
// implementations, so the simulator draws everything from these to reproduce exactly.
#include <cmath>
#include <cstdint>

namespace dls::sim {

inline std::uint64_t splitmix64(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class rng {
 public:
  explicit rng(std::uint64_t seed = 1) : s_(seed) {}
  std::uint64_t next() { return splitmix64(s_); }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  /// Standard normal (Box-Muller; the second value is discarded to keep the state simple).
  double normal() {
    double u1 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * uniform());
  }
  /// Gamma(shape, 1) by Marsaglia and Tsang; shape < 1 via the boost u^(1/shape).
  double gamma(double shape) {
    if (shape < 1.0) {
      double u = uniform();
      if (u < 1e-300) u = 1e-300;
      return gamma(shape + 1.0) * std::pow(u, 1.0 / shape);
    }
    const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x, v;
      do {
        x = normal();
        v = 1.0 + c * x;
      } while (v <= 0);
      v = v * v * v;
      const double u = uniform();
      if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
      if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
    }
  }

 private:
  std::uint64_t s_;
};

}  // namespace dls::sim
