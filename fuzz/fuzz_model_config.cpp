// The config.json parser: a bad file must end in load_error; an accepted one must describe a model
// whose derived sizes (head dimension, parameter count) compute without overflow.
#include "gpu/model_config.hpp"
#include "gpu/safetensors.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto c = dls::gpu::parse_model_config(text, "fuzz/config.json");
    volatile int64_t sink = c.parameter_count() + c.kv_dim();
    (void)sink;
  } catch (const dls::gpu::load_error&) {
  }
  return 0;
}
