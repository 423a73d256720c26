// The safetensors reader on a whole file image: a bad one must end in load_error. Every tensor it
// accepts must lie inside the image, which to_f32 then reads in full (ASan checks the bounds).
#include "gpu/safetensors.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  try {
    const auto tensors = dls::gpu::parse_safetensors(data, size, "fuzz.safetensors");
    for (const auto& [name, t] : tensors) {
      std::vector<float> out(static_cast<std::size_t>(t.numel()));
      t.to_f32(out.data());
    }
  } catch (const dls::gpu::load_error&) {
  }
  return 0;
}
