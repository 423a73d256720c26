#include "gpu/model_config.hpp"

#include "gpu/safetensors.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <type_traits>
#include <nlohmann/json.hpp>

namespace dls::gpu {

const char* architecture_name(architecture a) { return a == architecture::dream ? "Dream" : "LLaDA"; }

int64_t model_config::parameter_count() const {
  int64_t d = d_model, ff = mlp_hidden, kv = kv_dim();
  int64_t per_layer = d * d * 2 + d * kv * 2 + 3 * d * ff + 2 * d + (qkv_bias ? d + 2 * kv : 0);
  return per_layer * n_layers + (tied_head ? 1 : 2) * int64_t{vocab_size} * d + d;
}

namespace {

// 10^15 weights: a thousand times the largest published models, far below int64's 9.2 x 10^18.
constexpr double max_parameter_count = 1e15;

template <class T>
T field(const nlohmann::json& j, const std::string& path, const char* key, bool required, T fallback) {
  if (!j.contains(key) || j[key].is_null()) {
    if (required) throw load_error(path + ": missing field '" + key + "'");
    return fallback;
  }
  const auto& v = j[key];
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) throw load_error(path + ": field '" + key + "' has the wrong type (" + v.type_name() + ")");
    return v.get<bool>();
  } else {
    if (!v.is_number()) throw load_error(path + ": field '" + key + "' has the wrong type (" + v.type_name() + ")");
    // Checked before converting: a value outside T's range (1e100 for an int) has no conversion.
    const double x = v.get<double>();
    const bool in_range = std::isfinite(x) && x >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
                          x <= static_cast<double>(std::numeric_limits<T>::max());
    if constexpr (std::is_integral_v<T>) {
      if (v.is_number_integer()) {
        const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                                                 : v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                                                       v.get<int64_t>() <= std::numeric_limits<T>::max();
        if (fits) return static_cast<T>(v.get<int64_t>());
      } else if (in_range && x == std::trunc(x)) {
        return static_cast<T>(x);
      }
      throw load_error(path + ": field '" + key + "' must be an integer in [" +
                       std::to_string(std::numeric_limits<T>::min()) + ", " +
                       std::to_string(std::numeric_limits<T>::max()) + "], got " + v.dump());
    } else {
      if (!in_range) throw load_error(path + ": field '" + key + "' is out of range, got " + v.dump());
      return static_cast<T>(x);
    }
  }
}

// LLaDA's config.json (its own names: d_model, n_layers, mlp_hidden_size, embedding_size...).
model_config parse_llada_fields(const nlohmann::json& j, const std::string& path) {
  model_config c;
  c.d_model = field<int>(j, path, "d_model", true, 0);
  c.n_layers = field<int>(j, path, "n_layers", true, 0);
  c.n_heads = field<int>(j, path, "n_heads", true, 0);
  c.n_kv_heads = field<int>(j, path, "n_kv_heads", false, c.n_heads);
  // LLaDA's own fallback: int(mlp_ratio * d_model), computed in double so that it cannot overflow.
  const double ratio = field<double>(j, path, "mlp_ratio", false, 4.0);
  const double hidden = ratio * c.d_model;
  const bool has_hidden = j.contains("mlp_hidden_size") && !j["mlp_hidden_size"].is_null();
  if (!has_hidden && !(hidden >= 0 && hidden <= static_cast<double>(std::numeric_limits<int>::max())))
    throw load_error(path + ": mlp_ratio x d_model is outside the range of a layer width");
  c.mlp_hidden = field<int>(j, path, "mlp_hidden_size", false, has_hidden ? 0 : static_cast<int>(hidden));
  c.vocab_size = field<int>(j, path, "embedding_size", false, 0);
  if (c.vocab_size == 0) c.vocab_size = field<int>(j, path, "vocab_size", true, 0);
  c.max_seq = field<int>(j, path, "max_sequence_length", false, 4096);
  c.rope_theta = field<float>(j, path, "rope_theta", false, 10000.0f);
  c.rms_eps = field<float>(j, path, "rms_norm_eps", false, 1e-5f);
  c.mask_id = field<int32_t>(j, path, "mask_token_id", false, 126336);
  c.eos_id = field<int32_t>(j, path, "eos_token_id", false, 126081);
  if (field<bool>(j, path, "weight_tying", false, false))
    throw load_error(path + ": weight_tying=true is not a LLaDA layout (the LM head must be untied)");
  if (field<bool>(j, path, "include_bias", false, false) || field<bool>(j, path, "include_qkv_bias", false, false))
    throw load_error(path + ": biases are not supported for the LLaDA architecture");
  return c;
}

// Dream's config.json: Qwen2's names. Everything Qwen2 can switch on that Dream's layer does not
// have (sliding windows, RoPE scaling, another activation) is refused by name.
model_config parse_dream_fields(const nlohmann::json& j, const std::string& path) {
  model_config c;
  c.arch = architecture::dream;
  c.qkv_bias = true;
  c.logit_shift = 1;
  c.d_model = field<int>(j, path, "hidden_size", true, 0);
  c.n_layers = field<int>(j, path, "num_hidden_layers", true, 0);
  c.n_heads = field<int>(j, path, "num_attention_heads", true, 0);
  c.n_kv_heads = field<int>(j, path, "num_key_value_heads", false, c.n_heads);
  c.mlp_hidden = field<int>(j, path, "intermediate_size", true, 0);
  c.vocab_size = field<int>(j, path, "vocab_size", true, 0);
  c.max_seq = field<int>(j, path, "max_position_embeddings", false, 131072);
  c.rope_theta = field<float>(j, path, "rope_theta", false, 10000.0f);
  c.rms_eps = field<float>(j, path, "rms_norm_eps", false, 1e-6f);
  // DreamConfig's own defaults (Qwen2.5's vocabulary: <|mask|> and <|endoftext|>).
  c.mask_id = field<int32_t>(j, path, "mask_token_id", false, 151666);
  c.eos_id = field<int32_t>(j, path, "eos_token_id", false, 151643);
  c.tied_head = field<bool>(j, path, "tie_word_embeddings", false, false);
  if (field<bool>(j, path, "use_sliding_window", false, false))
    throw load_error(path + ": field 'use_sliding_window' is true; the engine attends over the whole canvas");
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    throw load_error(path + ": field 'rope_scaling' is set; the engine runs plain RoPE only");
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    throw load_error(path + ": field 'hidden_act' is " + j["hidden_act"].dump() + "; the engine runs SwiGLU (silu)");
  if (c.n_heads > 0 && c.d_model % c.n_heads == 0 && j.contains("head_dim") && !j["head_dim"].is_null() &&
      field<int>(j, path, "head_dim", false, 0) != c.d_model / c.n_heads)
    throw load_error(path + ": field 'head_dim' differs from hidden_size / num_attention_heads");
  return c;
}

}  // namespace

model_config load_model_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw load_error(path + ": cannot open config.json");
  std::stringstream text;
  text << in.rdbuf();
  return parse_model_config(text.str(), path);
}

model_config parse_model_config(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw load_error(path + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw load_error(path + ": top level is not a JSON object");
  std::string type = "llada";
  if (j.contains("model_type") && !j["model_type"].is_null()) {
    if (!j["model_type"].is_string()) throw load_error(path + ": field 'model_type' has the wrong type");
    type = j["model_type"].get<std::string>();
  }
  model_config c;
  if (type == "llada" || type == "LLaDA")
    c = parse_llada_fields(j, path);
  else if (type == "Dream" || type == "dream")
    c = parse_dream_fields(j, path);
  else
    throw load_error(path + ": field 'model_type' is \"" + type + "\"; the engine runs \"llada\" and \"Dream\"");
  auto positive = [&](int v, const char* key) {
    if (v <= 0) throw load_error(path + ": field '" + key + "' must be positive");
  };
  const bool dream = c.arch == architecture::dream;
  const char* d_name = dream ? "hidden_size" : "d_model";
  const char* heads_name = dream ? "num_attention_heads" : "n_heads";
  const char* kv_name = dream ? "num_key_value_heads" : "n_kv_heads";
  positive(c.d_model, d_name);
  positive(c.n_layers, dream ? "num_hidden_layers" : "n_layers");
  positive(c.n_heads, heads_name);
  positive(c.n_kv_heads, kv_name);
  positive(c.mlp_hidden, dream ? "intermediate_size" : "mlp_hidden_size");
  positive(c.vocab_size, "vocab_size");
  positive(c.max_seq, dream ? "max_position_embeddings" : "max_sequence_length");
  if (c.d_model % c.n_heads != 0) throw load_error(path + ": " + d_name + " is not a multiple of " + heads_name);
  if (c.n_heads % c.n_kv_heads != 0) throw load_error(path + ": " + heads_name + " is not a multiple of " + kv_name);
  // parameter_count() is 64-bit; checked in double first so that an absurd shape is refused by name.
  const double d = c.d_model, layers = c.n_layers, kv = static_cast<double>(c.n_kv_heads) * (d / c.n_heads);
  const double weights = (d * d * 2 + d * kv * 2 + 3 * d * c.mlp_hidden + 2 * d) * layers + 2.0 * c.vocab_size * d + d;
  if (weights > max_parameter_count)
    throw load_error(path + ": the shape implies " + std::to_string(weights) + " weights, over the limit of " +
                     std::to_string(max_parameter_count));
  if (c.head_dim() % 2 != 0) throw load_error(path + ": head dimension must be even for RoPE");
  if (c.mask_id < 0 || c.mask_id >= c.vocab_size) throw load_error(path + ": mask_token_id is outside the vocabulary");
  if (c.eos_id < 0 || c.eos_id >= c.vocab_size) throw load_error(path + ": eos_token_id is outside the vocabulary");
  return c;
}

model_config llada_8b_config() {
  model_config c;
  c.d_model = 4096;
  c.n_layers = 32;
  c.n_heads = 32;
  c.n_kv_heads = 32;
  c.mlp_hidden = 12288;
  c.vocab_size = 126464;
  c.rope_theta = 500000.0f;
  return c;
}

model_config dream_7b_config() {
  model_config c;
  c.arch = architecture::dream;
  c.qkv_bias = true;
  c.logit_shift = 1;
  c.d_model = 3584;
  c.n_layers = 28;
  c.n_heads = 28;
  c.n_kv_heads = 4;
  c.mlp_hidden = 18944;
  c.vocab_size = 152064;
  c.max_seq = 131072;
  c.rope_theta = 1000000.0f;
  c.rms_eps = 1e-6f;
  c.mask_id = 151666;
  c.eos_id = 151643;
  return c;
}

}  // namespace dls::gpu
