#pragma once
// LLaDA- and Dream-architecture weights, loaded from HF config.json + *.safetensors (one file,
// or the shards model.safetensors.index.json lists). F32 matrices are used in place from the
// memory mapping, and so are BF16 ones (the CPU converts them tile by tile inside its products,
// so an 8B model never exists in f32); F16 matrices and every vector (norms, biases) are
// converted to f32 once.
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
  const float* q_bias = nullptr;     // [d]   (Dream; null without QKV bias)
  const float* k_bias = nullptr;     // [kv]
  const float* v_bias = nullptr;     // [kv]
  /// The same matrices where the checkpoint keeps them in bf16 (then the f32 pointer is null).
  struct bf16_matrices {
    const uint16_t *q_proj = nullptr, *k_proj = nullptr, *v_proj = nullptr, *attn_out = nullptr,
                   *ff_proj = nullptr, *up_proj = nullptr, *ff_out = nullptr;
  } bf16;
};

class model {
 public:
  model_config config;
  const float* wte = nullptr;   // [V, d]
  const float* ln_f = nullptr;  // [d]
  const float* head = nullptr;  // [V, d]; the same pointer as wte when the head is tied
  const uint16_t* wte_bf16 = nullptr;   // set instead of wte for a bf16 checkpoint
  const uint16_t* head_bf16 = nullptr;  // set instead of head for a bf16 checkpoint
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

/// Loads `dir`/config.json and the shards `dir`/model.safetensors.index.json lists, or every
/// `dir`/*.safetensors without an index. Throws load_error with one line naming the file and the
/// tensor (missing, wrong shape, duplicate, in another shard than the index says, NaN or Inf
/// values) or byte offset, or the shard the index names that is not there.
std::shared_ptr<const model> load_model(const std::string& dir);

/// A model of the given shape with deterministic random weights (benchmarks, TP tests). Throws
/// std::invalid_argument naming the shape when its f32 weights exceed the memory available.
std::shared_ptr<const model> make_random_model(const model_config& cfg, uint64_t seed);

/// The LLaDA checkpoint names, in a stable order, with their expected shapes.
std::vector<std::pair<std::string, std::vector<int64_t>>> llada_tensor_shapes(const model_config& cfg);

/// The checkpoint names of cfg's architecture (LLaDA's, or Dream's Qwen2 names with the QKV
/// biases after each layer's matrices and no lm_head when tied), in a stable order.
std::vector<std::pair<std::string, std::vector<int64_t>>> tensor_shapes(const model_config& cfg);

}  // namespace dls::gpu
