#pragma once
// Model facts read from a Hugging Face config.json: LLaDA's own field names, or Dream's
// (Qwen2 names, model_type "Dream").
#include <cstdint>
#include <string>

namespace dls::gpu {

/// The two checkpoint families the engine runs. They share the layer (pre-RMSNorm, RoPE with
/// the half split, bidirectional attention, SwiGLU); Dream adds QKV bias, usually grouped-query
/// attention, and keeps its autoregressive parent's shift: the logit at row p - 1 predicts token p.
enum class architecture : uint8_t { llada, dream };
const char* architecture_name(architecture a);

/// Whose published sampler defines the proposal scores. LLaDA's generate() samples from
/// softmax(l / T) but ranks by the clean softmax(l); Dream's sample_tokens() ranks by the very
/// distribution it samples from, softmax(l / T) (T = 1 at temperature 0), and takes its entropy
/// as sum p log(p + 1e-10). It follows the checkpoint, not the request.
enum class sampler_family : uint8_t { llada, dream };
inline sampler_family sampler_of(architecture a) {
  return a == architecture::dream ? sampler_family::dream : sampler_family::llada;
}
/// The temperature of the softmax a family scores by: T for Dream at T > 0, else 1 (clean).
inline double score_temperature(sampler_family f, double temperature) {
  return f == sampler_family::dream && temperature > 0 ? temperature : 1.0;
}

struct model_config {
  architecture arch = architecture::llada;
  bool qkv_bias = false;    // q, k, v projections carry a bias (Dream)
  bool tied_head = false;   // the LM head is the embedding matrix (tie_word_embeddings)
  int logit_shift = 0;      // 1: the logits of row p - 1 propose token p (Dream)
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

/// Parses `path` (config.json); the family comes from "model_type" ("llada" or absent: LLaDA,
/// "Dream": Dream); throws load_error naming the file and field on a problem.
model_config load_model_config(const std::string& path);
/// The same from config.json's text; `path` names it in errors.
model_config parse_model_config(const std::string& text, const std::string& path);

/// LLaDA-8B's shape (d 4096, 32 layers, 32 heads, MLP 12288, vocab 126464) for benchmarks.
model_config llada_8b_config();
/// Dream-v0-7B's shape (d 3584, 28 layers, 28 heads over 4 KV heads, MLP 18944, vocab 152064).
model_config dream_7b_config();

}  // namespace dls::gpu
