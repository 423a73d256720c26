#include "gpu/model.hpp"

#include "gpu/dtype.hpp"
#include "gpu/finite_scan.hpp"
#include "gpu/host_memory.hpp"
#include "gpu/safetensors.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <nlohmann/json.hpp>

namespace dls::gpu {

model::model() = default;
model::~model() = default;

float* model::own(std::vector<float> buf) {
  owned_.push_back(std::move(buf));
  return owned_.back().data();
}

void model::keep(std::shared_ptr<safetensors_file> f) { files_.push_back(std::move(f)); }

std::vector<std::pair<std::string, std::vector<int64_t>>> llada_tensor_shapes(const model_config& c) {
  const int64_t d = c.d_model, kv = c.kv_dim(), ff = c.mlp_hidden, V = c.vocab_size;
  std::vector<std::pair<std::string, std::vector<int64_t>>> s;
  s.push_back({"model.transformer.wte.weight", {V, d}});
  for (int i = 0; i < c.n_layers; ++i) {
    std::string p = "model.transformer.blocks." + std::to_string(i) + ".";
    s.push_back({p + "attn_norm.weight", {d}});
    s.push_back({p + "q_proj.weight", {d, d}});
    s.push_back({p + "k_proj.weight", {kv, d}});
    s.push_back({p + "v_proj.weight", {kv, d}});
    s.push_back({p + "attn_out.weight", {d, d}});
    s.push_back({p + "ff_norm.weight", {d}});
    s.push_back({p + "ff_proj.weight", {ff, d}});
    s.push_back({p + "up_proj.weight", {ff, d}});
    s.push_back({p + "ff_out.weight", {d, ff}});
  }
  s.push_back({"model.transformer.ln_f.weight", {d}});
  s.push_back({"model.transformer.ff_out.weight", {V, d}});
  return s;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> tensor_shapes(const model_config& c) {
  if (c.arch == architecture::llada) return llada_tensor_shapes(c);
  const int64_t d = c.d_model, kv = c.kv_dim(), ff = c.mlp_hidden, V = c.vocab_size;
  std::vector<std::pair<std::string, std::vector<int64_t>>> s;
  s.push_back({"model.embed_tokens.weight", {V, d}});
  for (int i = 0; i < c.n_layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    s.push_back({p + "input_layernorm.weight", {d}});
    s.push_back({p + "self_attn.q_proj.weight", {d, d}});
    s.push_back({p + "self_attn.k_proj.weight", {kv, d}});
    s.push_back({p + "self_attn.v_proj.weight", {kv, d}});
    s.push_back({p + "self_attn.o_proj.weight", {d, d}});
    s.push_back({p + "post_attention_layernorm.weight", {d}});
    s.push_back({p + "mlp.gate_proj.weight", {ff, d}});
    s.push_back({p + "mlp.up_proj.weight", {ff, d}});
    s.push_back({p + "mlp.down_proj.weight", {d, ff}});
    if (c.qkv_bias) {
      s.push_back({p + "self_attn.q_proj.bias", {d}});
      s.push_back({p + "self_attn.k_proj.bias", {kv}});
      s.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
  }
  s.push_back({"model.norm.weight", {d}});
  if (!c.tied_head) s.push_back({"lm_head.weight", {V, d}});
  return s;
}

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// One tensor as bound: f32 (mapped or converted) or mapped bf16.
struct bound {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
};

// Binds every expected name, in the order tensor_shapes gives.
void bind_tensors(model& m, const std::vector<bound>& t) {
  std::size_t k = 0;
  const bool tied = m.config.tied_head;
  m.wte = t[k].f32;
  m.wte_bf16 = t[k++].bf16;
  m.layers.resize(static_cast<std::size_t>(m.config.n_layers));
  auto mat = [&](const float*& f, const uint16_t*& b) {
    f = t[k].f32;
    b = t[k++].bf16;
  };
  for (auto& l : m.layers) {
    l.attn_norm = t[k++].f32;
    mat(l.q_proj, l.bf16.q_proj);
    mat(l.k_proj, l.bf16.k_proj);
    mat(l.v_proj, l.bf16.v_proj);
    mat(l.attn_out, l.bf16.attn_out);
    l.ff_norm = t[k++].f32;
    mat(l.ff_proj, l.bf16.ff_proj);
    mat(l.up_proj, l.bf16.up_proj);
    mat(l.ff_out, l.bf16.ff_out);
    if (m.config.qkv_bias) {
      l.q_bias = t[k++].f32;
      l.k_bias = t[k++].f32;
      l.v_bias = t[k++].f32;
    }
  }
  m.ln_f = t[k++].f32;
  if (tied) {
    m.head = m.wte;
    m.head_bf16 = m.wte_bf16;
  } else {
    mat(m.head, m.head_bf16);
  }
}

int64_t first_non_finite_bf16(const uint16_t* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if ((p[i] & 0x7f80u) == 0x7f80u) return static_cast<int64_t>(i);
  return -1;
}

// The shard files of `dir`: those model.safetensors.index.json names (each must exist), or every
// *.safetensors when there is no index. `weight_map` receives the index's tensor -> file.
std::vector<std::string> shard_files(const std::string& dir, std::map<std::string, std::string>& weight_map) {
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::vector<std::string> files;
  if (std::ifstream in(index_path); in) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      throw load_error(index_path + ": not valid JSON (" + e.what() + ")");
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw load_error(index_path + ": missing object field 'weight_map'");
    std::set<std::string> seen;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) throw load_error(index_path + ": weight_map entry '" + name + "' is not a file name");
      const auto f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        throw load_error(index_path + ": weight_map entry '" + name + "' names '" + f + "', not a file in the folder");
      weight_map[name] = dir + "/" + f;
      if (seen.insert(f).second) {
        if (::access((dir + "/" + f).c_str(), R_OK) != 0)
          throw load_error(index_path + ": shard '" + f + "' (holding '" + name + "') is missing");
        files.push_back(dir + "/" + f);
      }
    }
    if (files.empty()) throw load_error(index_path + ": weight_map is empty");
    return files;
  }
  if (DIR* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0) files.push_back(dir + "/" + n);
    }
    ::closedir(d);
  } else {
    throw load_error(dir + ": cannot open model directory");
  }
  if (files.empty()) throw load_error(dir + ": no *.safetensors files");
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::shared_ptr<const model> load_model(const std::string& dir) {
  auto m = std::make_shared<model>();
  m->source = dir;
  m->config = load_model_config(dir + "/config.json");
  std::map<std::string, std::string> weight_map;
  const auto files = shard_files(dir, weight_map);
  std::map<std::string, std::pair<const tensor_view*, std::string>> index;
  for (const auto& f : files) {
    auto st = std::make_shared<safetensors_file>(f);
    for (const auto& [name, view] : st->tensors()) {
      auto [it, fresh] = index.emplace(name, std::make_pair(&view, f));
      if (!fresh) throw load_error(f + ": tensor '" + name + "' also appears in " + it->second.second);
      if (!weight_map.empty()) {
        auto w = weight_map.find(name);
        if (w != weight_map.end() && w->second != f)
          throw load_error(f + ": tensor '" + name + "' is here, but model.safetensors.index.json puts it in " +
                           w->second);
      }
    }
    m->keep(st);
  }
  std::vector<bound> tensors;
  for (const auto& [name, shape] : tensor_shapes(m->config)) {
    auto it = index.find(name);
    if (it == index.end()) {
      auto w = weight_map.find(name);
      throw load_error((w != weight_map.end() ? w->second : dir) + ": missing tensor '" + name + "'");
    }
    const tensor_view& v = *it->second.first;
    if (v.shape != shape)
      throw load_error(it->second.second + ": tensor '" + name + "' has shape " + shape_str(v.shape) +
                       ", expected " + shape_str(shape) + " from config.json");
    const auto n = static_cast<std::size_t>(v.numel());
    const auto addr = reinterpret_cast<std::uintptr_t>(v.data);
    bound b;
    int64_t bad = -1;
    double bad_value = 0.0;
    if (v.type == dtype::f32 && addr % alignof(float) == 0) {
      b.f32 = reinterpret_cast<const float*>(v.data);
    } else if (v.type == dtype::bf16 && shape.size() == 2 && addr % alignof(uint16_t) == 0) {
      b.bf16 = reinterpret_cast<const uint16_t*>(v.data);
      bad = first_non_finite_bf16(b.bf16, n);
      if (bad >= 0) bad_value = bf16_to_f32(b.bf16[bad]);
    } else {
      std::vector<float> buf(n);
      v.to_f32(buf.data());
      b.f32 = m->own(std::move(buf));
    }
    if (b.f32) {
      bad = first_non_finite(b.f32, n);
      if (bad >= 0) bad_value = b.f32[bad];
    }
    if (bad >= 0)
      throw load_error(it->second.second + ": tensor '" + name + "' holds " + (std::isnan(bad_value) ? "NaN" : "Inf") +
                       " at element " + std::to_string(bad) + " of " + std::to_string(v.numel()) +
                       "; the checkpoint is corrupt");
    tensors.push_back(b);
  }
  bind_tensors(*m, tensors);
  return m;
}

std::shared_ptr<const model> make_random_model(const model_config& cfg, uint64_t seed) {
  require_memory(4 * static_cast<std::uint64_t>(cfg.parameter_count()),
                 "a random model of d_model " + std::to_string(cfg.d_model) + ", " + std::to_string(cfg.n_layers) +
                     " layers and a vocabulary of " + std::to_string(cfg.vocab_size) + " (f32)");
  auto m = std::make_shared<model>();
  m->config = cfg;
  m->source = "random(seed=" + std::to_string(seed) + ")";
  std::mt19937_64 rng(seed);
  std::vector<bound> ptrs;
  for (const auto& [name, shape] : tensor_shapes(cfg)) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    std::vector<float> buf(n);
    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (bias) {
      std::normal_distribution<float> nd(0.0f, 0.1f);  // small, so the products still dominate
      for (auto& x : buf) x = nd(rng);
    } else if (shape.size() == 1) {
      std::fill(buf.begin(), buf.end(), 1.0f);
    } else {
      // Scale so activations stay O(1) through the residual stream.
      float stddev = 1.0f / std::sqrt(static_cast<float>(shape[1]));
      std::normal_distribution<float> nd(0.0f, stddev);
      for (auto& x : buf) x = nd(rng);
    }
    ptrs.push_back({m->own(std::move(buf)), nullptr});
  }
  bind_tensors(*m, ptrs);
  return m;
}

}  // namespace dls::gpu
