// KV cache wire bytes, as a node imports them when a request moves mid-block: a corrupt buffer
// must end in std::invalid_argument, and an accepted header must describe exactly the floats that
// follow it, which are then copied out as the backends import them, into f32 (the CPU cache)
// and into bf16 (the CUDA cache), whatever dtype the header names (ASan checks the bounds).
#include "gpu/kv_wire.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto d = dls::gpu::parse_kv_wire(bytes);
    const std::size_t n = d.count();
    if (n == 0) return 0;  // as the backends: nothing to copy
    std::vector<float> k(n), v(n);
    dls::gpu::read_kv_plane(bytes, d, 0, k.data());
    dls::gpu::read_kv_plane(bytes, d, 1, v.data());
    std::vector<uint16_t> hk(n), hv(n);
    dls::gpu::read_kv_plane(bytes, d, 0, hk.data());
    dls::gpu::read_kv_plane(bytes, d, 1, hv.data());
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
