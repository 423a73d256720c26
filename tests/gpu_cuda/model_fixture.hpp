#pragma once
// The model the whole-model CUDA tests run: the shipped models/tiny-llada when present, else a
// random model of its shape. Weights are rounded to bf16 on the host first, so the CPU
// reference and the CUDA backend compute with identical weights and the comparison isolates
// the backend (activation precision, kernels), not weight rounding.
#include "gpu/eval_set.hpp"
#include "gpu/model.hpp"
#include "gpu/tokenizer.hpp"

#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace dls_test {

inline std::string tiny_dir() { return std::string(DLS_SOURCE_DIR) + "/models/tiny-llada"; }

inline bool have_tiny() {
  namespace fs = std::filesystem;
  if (!fs::exists(tiny_dir() + "/config.json")) return false;
  for (const auto& e : fs::directory_iterator(tiny_dir()))
    if (e.path().extension() == ".safetensors") return true;
  return false;
}

/// A copy of `m` with every matrix rounded to bf16 (norm vectors stay f32, as on the device)
/// and the LM head multiplied by head_scale.
inline std::shared_ptr<const dls::gpu::model> bf16_copy(const dls::gpu::model& m, float head_scale) {
  using dls::gpu::bf16_to_f32;
  using dls::gpu::f32_to_bf16;
  auto out = std::make_shared<dls::gpu::model>();
  out->config = m.config;
  out->source = m.source + " (bf16-rounded)";
  const auto& c = m.config;
  const std::size_t d = static_cast<std::size_t>(c.d_model), kv = static_cast<std::size_t>(c.kv_dim()),
                    ff = static_cast<std::size_t>(c.mlp_hidden), V = static_cast<std::size_t>(c.vocab_size);
  auto mat = [&](const float* p, std::size_t n, float scale = 1.0f) -> const float* {
    std::vector<float> v(p, p + n);
    for (auto& x : v) x = bf16_to_f32(f32_to_bf16(x * scale));
    return out->own(std::move(v));
  };
  auto vec = [&](const float* p, std::size_t n) -> const float* { return out->own(std::vector<float>(p, p + n)); };
  out->wte = mat(m.wte, V * d);
  for (const auto& l : m.layers) {
    dls::gpu::layer_weights w;
    w.attn_norm = vec(l.attn_norm, d);
    w.q_proj = mat(l.q_proj, d * d);
    w.k_proj = mat(l.k_proj, kv * d);
    w.v_proj = mat(l.v_proj, kv * d);
    w.attn_out = mat(l.attn_out, d * d);
    w.ff_norm = vec(l.ff_norm, d);
    w.ff_proj = mat(l.ff_proj, ff * d);
    w.up_proj = mat(l.up_proj, ff * d);
    w.ff_out = mat(l.ff_out, d * ff);
    out->layers.push_back(w);
  }
  out->ln_f = vec(m.ln_f, d);
  out->head = mat(m.head, V * d, head_scale);
  return out;
}

struct test_model {
  std::shared_ptr<const dls::gpu::model> m;
  std::vector<std::vector<int32_t>> prompts;
  std::string what;
  int gen_length = 32;
  int block_length = 8;
};

inline test_model load_test_model() {
  test_model t;
  if (have_tiny()) {
    auto base = dls::gpu::load_model(tiny_dir());
    t.m = bf16_copy(*base, 1.0f);
    t.what = "shipped models/tiny-llada";
    const std::string eval = tiny_dir() + "/eval.jsonl";
    if (std::filesystem::exists(eval) && std::filesystem::exists(tiny_dir() + "/tokenizer.json")) {
      auto tok = dls::gpu::load_tokenizer(tiny_dir());
      auto set = dls::gpu::load_eval_set(eval);
      for (const auto& p : set) {
        auto ids = tok->encode(p.prompt);
        if (!ids.empty() && static_cast<int>(ids.size()) + t.gen_length <= t.m->config.max_seq) t.prompts.push_back(ids);
        if (t.prompts.size() == 6) break;
      }
    }
  } else {
    dls::gpu::model_config c;
    c.d_model = 128;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 4;
    c.mlp_hidden = 352;
    c.vocab_size = 64;
    c.max_seq = 128;
    c.rope_theta = 1e4f;
    c.mask_id = 1;
    c.eos_id = 0;
    // A sharper head gives confident proposals, as a trained model has.
    t.m = bf16_copy(*dls::gpu::make_random_model(c, 5), 8.0f);
    t.what = "random model of the tiny shape (models/tiny-llada not present)";
  }
  if (t.prompts.empty()) {
    std::mt19937 rng(3);
    const auto& c = t.m->config;
    for (int len : {7, 12, 20, 31}) {
      std::vector<int32_t> p;
      while (static_cast<int>(p.size()) < len) {
        auto id = static_cast<int32_t>(rng() % static_cast<unsigned>(c.vocab_size));
        if (id != c.mask_id && id != c.eos_id) p.push_back(id);
      }
      t.prompts.push_back(p);
    }
  }
  BOOST_TEST_MESSAGE("model: " << t.what << ", " << t.prompts.size() << " prompts");
  return t;
}

}  // namespace dls_test
