#include "dilaserve/random_model.hpp"

#include "gpu/model.hpp"
#include "gpu/model_config.hpp"
#include "gpu/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <fstream>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace dls::cli {

std::string write_random_model(const fs::path& dir, const std::string& shipped, int d_model, int layers, int max_seq) {
  fs::create_directories(dir);
  auto base = dls::gpu::load_model_config(shipped + "/config.json");
  dls::gpu::model_config mc = base;
  mc.d_model = d_model;
  mc.n_layers = layers;
  mc.n_heads = d_model / 64;
  mc.n_kv_heads = mc.n_heads;
  mc.mlp_hidden = d_model * 11 / 4;
  if (max_seq > 0) mc.max_seq = max_seq;
  auto m = dls::gpu::make_random_model(mc, 2);
  auto shapes = dls::gpu::llada_tensor_shapes(mc);
  // The pointers in llada_tensor_shapes order (the order the loader binds them in).
  std::vector<const float*> data{m->wte};
  for (auto& l : m->layers)
    for (auto* p : {l.attn_norm, l.q_proj, l.k_proj, l.v_proj, l.attn_out, l.ff_norm, l.ff_proj, l.up_proj, l.ff_out})
      data.push_back(p);
  data.push_back(m->ln_f);
  data.push_back(m->head);
  dls::gpu::write_safetensors_f32((dir / "model.safetensors").string(), shapes, data);
  json cfg = json::parse(std::ifstream(shipped + "/config.json"));
  cfg["d_model"] = mc.d_model;
  cfg["n_layers"] = mc.n_layers;
  cfg["n_heads"] = mc.n_heads;
  cfg["n_kv_heads"] = mc.n_kv_heads;
  cfg["mlp_hidden_size"] = mc.mlp_hidden;
  cfg["max_sequence_length"] = mc.max_seq;
  std::ofstream(dir / "config.json") << cfg.dump(2) << "\n";
  fs::copy_file(shipped + "/tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  return dir.string();
}

}  // namespace dls::cli
