// Resident bf16 weights: one pool block per device holding every tensor, 256-byte aligned.
#include "gpu/cuda/kernels.cuh"
#include "gpu/dtype.hpp"

#include <cmath>
#include <cstring>

namespace dls::gpu {

namespace {

using cuda::bf16;

struct tensor_slot {
  std::size_t offset = 0;
  std::size_t count = 0;
  bool f32 = false;  // norm weights and biases stay f32
  bool bias = false;
  int fan_in = 1;
};

constexpr std::size_t align_up(std::size_t n) { return (n + 255) / 256 * 256; }

// The tensors in upload order: LLaDA's, plus each layer's q/k/v biases for Dream, and no head
// when it is tied (the embedding serves as the head).
struct planned_tensor {
  std::size_t count = 0;
  bool f32 = false;  // norms and biases stay f32
  bool bias = false;
  int fan_in = 1;
};

std::vector<planned_tensor> plan_tensors(const model_config& cfg) {
  const std::size_t d = static_cast<std::size_t>(cfg.d_model), kv = static_cast<std::size_t>(cfg.kv_dim()),
                    ff = static_cast<std::size_t>(cfg.mlp_hidden), V = static_cast<std::size_t>(cfg.vocab_size);
  auto matrix = [](std::size_t rows, std::size_t cols) { return planned_tensor{rows * cols, false, false, static_cast<int>(cols)}; };
  auto vec = [](std::size_t n, bool bias) { return planned_tensor{n, true, bias, 1}; };
  std::vector<planned_tensor> t{matrix(V, d)};
  for (int l = 0; l < cfg.n_layers; ++l) {
    for (const auto& x : {vec(d, false), matrix(d, d), matrix(kv, d), matrix(kv, d), matrix(d, d), vec(d, false),
                          matrix(ff, d), matrix(ff, d), matrix(d, ff)})
      t.push_back(x);
    if (cfg.qkv_bias)
      for (const auto& x : {vec(d, true), vec(kv, true), vec(kv, true)}) t.push_back(x);
  }
  t.push_back(vec(d, false));
  if (!cfg.tied_head) t.push_back(matrix(V, d));
  return t;
}

/// Lays out every tensor in plan_tensors order and binds the pointers after allocation.
std::shared_ptr<cuda_weights> allocate(const model_config& cfg, int device, std::vector<tensor_slot>& slots) {
  auto w = std::make_shared<cuda_weights>();
  w->config = cfg;
  w->device = device;
  std::size_t total = 0;
  for (const auto& p : plan_tensors(cfg)) {
    tensor_slot s;
    s.count = p.count;
    s.f32 = p.f32;
    s.bias = p.bias;
    s.fan_in = p.fan_in;
    s.offset = total;
    total += align_up(s.count * (s.f32 ? sizeof(float) : sizeof(bf16)));
    slots.push_back(s);
  }
  // Weights are allocated once and read by every stream, so their pool needs no stream.
  w->pool = std::make_shared<cuda::device_pool>(device, nullptr);
  w->storage = cuda::device_buffer(w->pool, total);
  auto* base = w->storage.as<unsigned char>();
  std::size_t k = 0;
  auto next_bf = [&] { return reinterpret_cast<const bf16*>(base + slots[k++].offset); };
  auto next_f = [&] { return reinterpret_cast<const float*>(base + slots[k++].offset); };
  w->wte = next_bf();
  w->layers.resize(static_cast<std::size_t>(cfg.n_layers));
  for (auto& l : w->layers) {
    l.attn_norm = next_f();
    l.q = next_bf();
    l.k = next_bf();
    l.v = next_bf();
    l.o = next_bf();
    l.ff_norm = next_f();
    l.gate = next_bf();
    l.up = next_bf();
    l.down = next_bf();
    if (cfg.qkv_bias) {
      l.q_bias = next_f();
      l.k_bias = next_f();
      l.v_bias = next_f();
    }
  }
  w->ln_f = next_f();
  w->head = cfg.tied_head ? w->wte : next_bf();
  return w;
}

// Each tensor as the host model holds it: f32, or (a bf16 checkpoint's matrices) bf16.
struct host_tensor {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
};

std::vector<host_tensor> host_pointers(const model& m) {
  std::vector<host_tensor> p{{m.wte, m.wte_bf16}};
  for (const auto& l : m.layers) {
    p.push_back({l.attn_norm, nullptr});
    p.push_back({l.q_proj, l.bf16.q_proj});
    p.push_back({l.k_proj, l.bf16.k_proj});
    p.push_back({l.v_proj, l.bf16.v_proj});
    p.push_back({l.attn_out, l.bf16.attn_out});
    p.push_back({l.ff_norm, nullptr});
    p.push_back({l.ff_proj, l.bf16.ff_proj});
    p.push_back({l.up_proj, l.bf16.up_proj});
    p.push_back({l.ff_out, l.bf16.ff_out});
    if (m.config.qkv_bias) {
      p.push_back({l.q_bias, nullptr});
      p.push_back({l.k_bias, nullptr});
      p.push_back({l.v_bias, nullptr});
    }
  }
  p.push_back({m.ln_f, nullptr});
  if (!m.config.tied_head) p.push_back({m.head, m.head_bf16});
  return p;
}

}  // namespace

std::shared_ptr<const cuda_weights> upload_weights(const model& m, int device) {
  if (cuda_device_count() <= device || device < 0)
    throw cuda_error("upload_weights: CUDA device " + std::to_string(device) + " does not exist");
  cuda::device_guard g(device);
  std::vector<tensor_slot> slots;
  auto w = allocate(m.config, device, slots);
  w->source = m.source;
  auto host = host_pointers(m);
  if (host.size() != slots.size()) throw std::logic_error("upload_weights: tensor count mismatch");
  // Convert to bf16 on the host through a pinned staging buffer, in chunks.
  constexpr std::size_t chunk = std::size_t{16} << 20;  // elements
  void* staging = nullptr;
  DLS_CUDA(cudaMallocHost(&staging, chunk * sizeof(float)));
  try {
    auto* base = w->storage.as<unsigned char>();
    for (std::size_t t = 0; t < slots.size(); ++t) {
      const auto& s = slots[t];
      if (!host[t].f32 && !host[t].bf16) throw std::invalid_argument("upload_weights: the model has a null tensor");
      for (std::size_t i = 0; i < s.count; i += chunk) {
        const std::size_t n = std::min(chunk, s.count - i);
        std::size_t bytes;
        if (s.f32) {
          std::memcpy(staging, host[t].f32 + i, n * sizeof(float));
          bytes = n * sizeof(float);
          DLS_CUDA(cudaMemcpy(base + s.offset + i * sizeof(float), staging, bytes, cudaMemcpyHostToDevice));
        } else {
          auto* dst = static_cast<uint16_t*>(staging);
          if (host[t].bf16)
            std::memcpy(dst, host[t].bf16 + i, n * sizeof(uint16_t));
          else
            for (std::size_t j = 0; j < n; ++j) dst[j] = f32_to_bf16(host[t].f32[i + j]);
          bytes = n * sizeof(uint16_t);
          DLS_CUDA(cudaMemcpy(base + s.offset + i * sizeof(bf16), staging, bytes, cudaMemcpyHostToDevice));
        }
      }
    }
  } catch (...) {
    (void)cudaFreeHost(staging);
    throw;
  }
  DLS_CUDA(cudaFreeHost(staging));
  return w;
}

std::shared_ptr<const cuda_weights> make_random_cuda_weights(const model_config& cfg, uint64_t seed, int device) {
  if (cuda_device_count() <= device || device < 0)
    throw cuda_error("make_random_cuda_weights: CUDA device " + std::to_string(device) + " does not exist");
  cuda::device_guard g(device);
  std::vector<tensor_slot> slots;
  auto w = allocate(cfg, device, slots);
  w->source = "random-bf16(seed=" + std::to_string(seed) + ")";
  auto* base = w->storage.as<unsigned char>();
  for (std::size_t t = 0; t < slots.size(); ++t) {
    const auto& s = slots[t];
    if (s.f32) {
      // Norm weights 1; biases 0, which costs the same as any other value.
      cuda::fill_f32(reinterpret_cast<float*>(base + s.offset), s.count, s.bias ? 0.0f : 1.0f, nullptr);
    } else {
      // Uniform on [-a, a) has standard deviation a / sqrt(3); match 1 / sqrt(fan_in).
      const float a = std::sqrt(3.0f / static_cast<float>(s.fan_in));
      cuda::fill_uniform_bf16(reinterpret_cast<bf16*>(base + s.offset), s.count,
                              seed * 0x100000001B3ull + t * 0x9E3779B97F4A7C15ull, a, nullptr);
    }
  }
  DLS_CUDA(cudaDeviceSynchronize());
  return w;
}

const model_config& weights_config(const cuda_weights& w) { return w.config; }
int weights_device(const cuda_weights& w) { return w.device; }
std::size_t weights_bytes(const cuda_weights& w) { return w.storage.bytes(); }

}  // namespace dls::gpu
