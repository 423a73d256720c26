#include "gpu/checkpoint_writer.hpp"

#include "gpu/dtype.hpp"
#include "gpu/model.hpp"
#include "gpu/safetensors.hpp"


#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

namespace dls::gpu {

model_config published_shape(const std::string& name) {
  if (name == "llada-8b") return llada_8b_config();
  if (name == "dream-7b") return dream_7b_config();
  throw std::invalid_argument("unknown shape '" + name + "' (llada-8b, dream-7b)");
}

namespace {

// LLaDA-8B-Instruct's config.json fields that describe the model (its remote code reads more,
// all at their defaults here).
nlohmann::ordered_json llada_config_json(const model_config& c) {
  return {{"architectures", {"LLaDAModelLM"}},
          {"model_type", "llada"},
          {"activation_type", "silu"},
          {"block_type", "llama"},
          {"layer_norm_type", "rms"},
          {"rope", true},
          {"alibi", false},
          {"d_model", c.d_model},
          {"n_heads", c.n_heads},
          {"n_kv_heads", c.n_kv_heads},
          {"n_layers", c.n_layers},
          {"mlp_hidden_size", c.mlp_hidden},
          {"mlp_ratio", 4},
          {"embedding_size", c.vocab_size},
          {"vocab_size", c.vocab_size},
          {"max_sequence_length", c.max_seq},
          {"rope_theta", c.rope_theta},
          {"rms_norm_eps", c.rms_eps},
          {"mask_token_id", c.mask_id},
          {"eos_token_id", c.eos_id},
          {"pad_token_id", c.eos_id},
          {"include_bias", false},
          {"include_qkv_bias", false},
          {"weight_tying", false},
          {"torch_dtype", "bfloat16"}};
}

// Dream-v0-Instruct-7B's config.json (Qwen2's names).
nlohmann::ordered_json dream_config_json(const model_config& c) {
  return {{"architectures", {"DreamModel"}},
          {"model_type", "Dream"},
          {"hidden_act", "silu"},
          {"hidden_size", c.d_model},
          {"intermediate_size", c.mlp_hidden},
          {"num_attention_heads", c.n_heads},
          {"num_hidden_layers", c.n_layers},
          {"num_key_value_heads", c.n_kv_heads},
          {"max_position_embeddings", c.max_seq},
          {"max_window_layers", c.n_layers},
          {"vocab_size", c.vocab_size},
          {"rms_norm_eps", c.rms_eps},
          {"rope_theta", c.rope_theta},
          {"rope_scaling", nullptr},
          {"sliding_window", nullptr},
          {"use_sliding_window", false},
          {"tie_word_embeddings", c.tied_head},
          {"mask_token_id", c.mask_id},
          {"bos_token_id", c.eos_id},
          {"eos_token_id", c.eos_id},
          {"pad_token_id", c.eos_id},
          {"attention_dropout", 0.0},
          {"torch_dtype", "bfloat16"}};
}

uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct planned {
  std::string name;
  std::vector<int64_t> shape;
  int64_t count = 1;
};

void write_all(std::FILE* f, const void* p, std::size_t n, const std::string& path) {
  if (std::fwrite(p, 1, n, f) != n) throw load_error(path + ": write failed (" + std::strerror(errno) + ")");
}

}  // namespace

checkpoint_summary write_random_checkpoint(const std::string& dir, const model_config& cfg, uint64_t seed,
                                           int64_t max_shard_bytes) {
  if (max_shard_bytes <= 0) throw std::invalid_argument("the shard size must be positive");
  // Parents too: `write-random-checkpoint OUT/ckpt/llada-8b` into a fresh OUT is the usual call.
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw load_error(dir + ": cannot create the folder (" + ec.message() + ")");
  {
    std::ofstream f(dir + "/config.json");
    f << (cfg.arch == architecture::dream ? dream_config_json(cfg) : llada_config_json(cfg)).dump(2) << "\n";
    if (!f) throw load_error(dir + "/config.json: write failed");
  }
  // Whole tensors per shard, in checkpoint order, as save_pretrained splits them.
  std::vector<std::vector<planned>> shards(1);
  int64_t in_shard = 0;
  for (const auto& [name, shape] : tensor_shapes(cfg)) {
    planned p{name, shape};
    for (auto d : shape) p.count *= d;
    const int64_t bytes = p.count * 2;
    if (in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(p);
    in_shard += bytes;
  }
  checkpoint_summary sum;
  sum.shards = static_cast<int>(shards.size());
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  std::vector<uint16_t> buf(std::size_t{1} << 20);
  uint64_t tensor_index = 0;
  for (std::size_t s = 0; s < shards.size(); ++s) {
    char fname[64];
    std::snprintf(fname, sizeof fname, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    const std::string path = dir + "/" + fname;
    nlohmann::ordered_json header;
    int64_t off = 0;
    for (const auto& p : shards[s]) {
      header[p.name] = {{"dtype", "BF16"}, {"shape", p.shape}, {"data_offsets", {off, off + p.count * 2}}};
      off += p.count * 2;
      weight_map[p.name] = fname;
    }
    header["__metadata__"] = {{"format", "pt"}};
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw load_error(path + ": cannot open for writing");
    try {
      const uint64_t n = h.size();
      write_all(f, &n, 8, path);
      write_all(f, h.data(), h.size(), path);
      for (const auto& p : shards[s]) {
        const bool norm = p.shape.size() == 1 && p.name.find("bias") == std::string::npos;
        const bool bias = p.name.find("bias") != std::string::npos;
        const float a = bias ? 0.1f : std::sqrt(3.0f / static_cast<float>(p.shape.size() == 2 ? p.shape[1] : 1));
        const uint64_t key = splitmix(seed ^ (++tensor_index * 0xD1B54A32D192ED03ull));
        for (int64_t i0 = 0; i0 < p.count; i0 += static_cast<int64_t>(buf.size())) {
          const auto n_chunk = static_cast<std::size_t>(std::min<int64_t>(static_cast<int64_t>(buf.size()), p.count - i0));
          for (std::size_t i = 0; i < n_chunk; ++i) {
            if (norm) {
              buf[i] = f32_to_bf16(1.0f);
            } else {
              const double u = static_cast<double>(splitmix(key + static_cast<uint64_t>(i0) + i) >> 11) * 0x1.0p-53;
              buf[i] = f32_to_bf16(static_cast<float>((2.0 * u - 1.0) * a));
            }
          }
          write_all(f, buf.data(), n_chunk * sizeof(uint16_t), path);
        }
        ++sum.tensors;
      }
    } catch (...) {
      std::fclose(f);
      throw;
    }
    if (std::fclose(f) != 0) throw load_error(path + ": write failed");
    sum.weight_bytes += off;
  }
  std::ofstream idx(dir + "/model.safetensors.index.json");
  idx << nlohmann::ordered_json{{"metadata", {{"total_size", sum.weight_bytes}}}, {"weight_map", weight_map}}.dump(2)
      << "\n";
  if (!idx) throw load_error(dir + "/model.safetensors.index.json: write failed");
  return sum;
}

}  // namespace dls::gpu
