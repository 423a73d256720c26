#pragma once
// Model facts read from a LLaDA-style HF config.json (LLaDA's own field names).
#include <cstdint>
#include <string>

namespace dls::gpu {

struct model_config {
  int d_model = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int mlp_hidden = 0;
  int vocab_size = 0;      // rows of the embedding and of the LM head (LLaDA: embedding_size)
  int max_seq = 4096;
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  int32_t mask_id = 126336;
  int32_t eos_id = 126081;

  int head_dim() const { return d_model / n_heads; }
  int kv_dim() const { return n_kv_heads * head_dim(); }
  /// Non-embedding parameters plus embedding and head, as a count of weights.
  int64_t parameter_count() const;
};

/// Parses `path` (config.json); throws load_error naming the file and field on a problem.
model_config load_model_config(const std::string& path);
/// The same from config.json's text; `path` names it in errors.
model_config parse_model_config(const std::string& text, const std::string& path);

/// LLaDA-8B's shape (d 4096, 32 layers, 32 heads, MLP 12288, vocab 126464) for benchmarks.
model_config llada_8b_config();

}  // namespace dls::gpu
