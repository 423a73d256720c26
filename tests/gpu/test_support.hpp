#pragma once
// Helpers for engine tests: a small model config and a temporary directory.
#include "gpu/model.hpp"
#include "gpu/safetensors.hpp"

#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

namespace dls::gpu::test {

inline model_config small_config() {
  model_config c;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.mlp_hidden = 64;
  c.vocab_size = 40;
  c.max_seq = 128;
  c.rope_theta = 10000.0f;
  c.mask_id = 1;
  c.eos_id = 0;
  return c;
}

struct temp_dir {
  std::string path;
  temp_dir() {
    char tmpl[] = "/tmp/dls_test_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

inline void write_config(const std::string& dir, const model_config& c, const std::string& extra = "") {
  std::ofstream f(dir + "/config.json");
  f << "{\"d_model\": " << c.d_model << ", \"n_layers\": " << c.n_layers << ", \"n_heads\": " << c.n_heads
    << ", \"n_kv_heads\": " << c.n_kv_heads << ", \"mlp_hidden_size\": " << c.mlp_hidden
    << ", \"vocab_size\": " << c.vocab_size << ", \"embedding_size\": " << c.vocab_size
    << ", \"rope_theta\": " << c.rope_theta << ", \"rms_norm_eps\": 1e-5, \"mask_token_id\": " << c.mask_id
    << ", \"eos_token_id\": " << c.eos_id << ", \"weight_tying\": false" << extra << "}";
}

/// Writes `m` as a LLaDA checkpoint (config.json + model.safetensors) in `dir`.
inline void write_checkpoint(const std::string& dir, const model& m, dtype stored = dtype::f32) {
  write_config(dir, m.config);
  auto shapes = llada_tensor_shapes(m.config);
  std::vector<const float*> ptrs{m.wte};
  for (const auto& l : m.layers)
    for (auto* p : {l.attn_norm, l.q_proj, l.k_proj, l.v_proj, l.attn_out, l.ff_norm, l.ff_proj, l.up_proj, l.ff_out})
      ptrs.push_back(p);
  ptrs.push_back(m.ln_f);
  ptrs.push_back(m.head);
  write_safetensors_f32(dir + "/model.safetensors", shapes, ptrs, stored);
}

}  // namespace dls::gpu::test
