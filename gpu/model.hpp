#pragma once
// LLaDA-architecture weights in f32, loaded from HF config.json + *.safetensors.
// F32 tensors are used in place from the memory mapping; BF16/F16 ones are converted once.
#include "gpu/model_config.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dls::gpu {

class safetensors_file;

struct layer_weights {
  const float* attn_norm = nullptr;  // [d]
  const float* q_proj = nullptr;     // [d, d]   (rows = output features, as nn.Linear)
  const float* k_proj = nullptr;     // [kv, d]
  const float* v_proj = nullptr;     // [kv, d]
  const float* attn_out = nullptr;   // [d, d]
  const float* ff_norm = nullptr;    // [d]
  const float* ff_proj = nullptr;    // [ff, d]  gate
  const float* up_proj = nullptr;    // [ff, d]
  const float* ff_out = nullptr;     // [d, ff]
};

class model {
 public:
  model_config config;
  const float* wte = nullptr;   // [V, d]
  const float* ln_f = nullptr;  // [d]
  const float* head = nullptr;  // [V, d], untied
  std::vector<layer_weights> layers;
  std::string source;           // where it was loaded from, for messages

  model();
  ~model();
  model(const model&) = delete;
  model& operator=(const model&) = delete;

  /// Keeps a buffer alive for the model's lifetime and returns its data pointer.
  float* own(std::vector<float> buf);
  void keep(std::shared_ptr<safetensors_file> f);

 private:
  std::vector<std::vector<float>> owned_;
  std::vector<std::shared_ptr<safetensors_file>> files_;
};

/// Loads `dir`/config.json and every `dir`/*.safetensors. Throws load_error with one line
/// naming the file and the tensor (missing, wrong shape, duplicate, NaN or Inf values) or byte offset.
std::shared_ptr<const model> load_model(const std::string& dir);

/// A model of the given shape with deterministic random weights (benchmarks, TP tests).
std::shared_ptr<const model> make_random_model(const model_config& cfg, uint64_t seed);

/// The LLaDA checkpoint names, in a stable order, with their expected shapes.
std::vector<std::pair<std::string, std::vector<int64_t>>> llada_tensor_shapes(const model_config& cfg);

}  // namespace dls::gpu
