#include "gpu/model.hpp"

#include "gpu/finite_scan.hpp"
#include "gpu/safetensors.hpp"

#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>

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

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// Binds every expected name to a pointer, in the order llada_tensor_shapes gives.
void bind(model& m, const std::vector<const float*>& ptrs) {
  std::size_t k = 0;
  m.wte = ptrs[k++];
  m.layers.resize(static_cast<std::size_t>(m.config.n_layers));
  for (auto& l : m.layers) {
    l.attn_norm = ptrs[k++];
    l.q_proj = ptrs[k++];
    l.k_proj = ptrs[k++];
    l.v_proj = ptrs[k++];
    l.attn_out = ptrs[k++];
    l.ff_norm = ptrs[k++];
    l.ff_proj = ptrs[k++];
    l.up_proj = ptrs[k++];
    l.ff_out = ptrs[k++];
  }
  m.ln_f = ptrs[k++];
  m.head = ptrs[k++];
}

}  // namespace

std::shared_ptr<const model> load_model(const std::string& dir) {
  auto m = std::make_shared<model>();
  m->source = dir;
  m->config = load_model_config(dir + "/config.json");
  std::vector<std::string> files;
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
  std::map<std::string, std::pair<const tensor_view*, std::string>> index;
  for (const auto& f : files) {
    auto st = std::make_shared<safetensors_file>(f);
    for (const auto& [name, view] : st->tensors()) {
      auto [it, fresh] = index.emplace(name, std::make_pair(&view, f));
      if (!fresh) throw load_error(f + ": tensor '" + name + "' also appears in " + it->second.second);
    }
    m->keep(st);
  }
  std::vector<const float*> ptrs;
  for (const auto& [name, shape] : llada_tensor_shapes(m->config)) {
    auto it = index.find(name);
    if (it == index.end()) throw load_error(dir + ": missing tensor '" + name + "'");
    const tensor_view& v = *it->second.first;
    if (v.shape != shape)
      throw load_error(it->second.second + ": tensor '" + name + "' has shape " + shape_str(v.shape) +
                       ", expected " + shape_str(shape) + " from config.json");
    bool aligned = reinterpret_cast<std::uintptr_t>(v.data) % alignof(float) == 0;
    if (v.type == dtype::f32 && aligned) {
      ptrs.push_back(reinterpret_cast<const float*>(v.data));
    } else {
      std::vector<float> buf(static_cast<std::size_t>(v.numel()));
      v.to_f32(buf.data());
      ptrs.push_back(m->own(std::move(buf)));
    }
    if (auto bad = first_non_finite(ptrs.back(), static_cast<std::size_t>(v.numel())); bad >= 0)
      throw load_error(it->second.second + ": tensor '" + name + "' holds " +
                       (std::isnan(ptrs.back()[bad]) ? "NaN" : "Inf") + " at element " + std::to_string(bad) +
                       " of " + std::to_string(v.numel()) + "; the checkpoint is corrupt");
  }
  bind(*m, ptrs);
  return m;
}

std::shared_ptr<const model> make_random_model(const model_config& cfg, uint64_t seed) {
  auto m = std::make_shared<model>();
  m->config = cfg;
  m->source = "random(seed=" + std::to_string(seed) + ")";
  std::mt19937_64 rng(seed);
  std::vector<const float*> ptrs;
  for (const auto& [name, shape] : llada_tensor_shapes(cfg)) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    std::vector<float> buf(n);
    if (shape.size() == 1) {
      std::fill(buf.begin(), buf.end(), 1.0f);
    } else {
      // Scale so activations stay O(1) through the residual stream.
      float stddev = 1.0f / std::sqrt(static_cast<float>(shape[1]));
      std::normal_distribution<float> nd(0.0f, stddev);
      for (auto& x : buf) x = nd(rng);
    }
    ptrs.push_back(m->own(std::move(buf)));
  }
  bind(*m, ptrs);
  return m;
}

}  // namespace dls::gpu
