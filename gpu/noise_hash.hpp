#pragma once
// The counter-based uniform behind Gumbel sampling, shared by the CPU backend and the CUDA
// kernels so that a sampled decode is bit-identical on either (and across TP ranks and
// migrations): no generator state, only the coordinates of the draw.
#include <cstdint>

#if defined(__CUDACC__)
#define DLS_HOST_DEVICE __host__ __device__
#else
#define DLS_HOST_DEVICE
#endif

namespace dls::gpu {

/// A uniform variate in (0, 1) from splitmix64 over the draw's coordinates.
DLS_HOST_DEVICE inline double noise_uniform(uint64_t seed, uint64_t counter, int32_t row, int32_t token) {
  uint64_t z = seed ^ (counter * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(static_cast<uint32_t>(row)) << 32) ^
               static_cast<uint64_t>(static_cast<uint32_t>(token)) * 0xD6E8FEB86659FD93ull;
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (static_cast<double>(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

}  // namespace dls::gpu
