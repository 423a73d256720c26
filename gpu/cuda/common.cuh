#pragma once
// Internal to the CUDA backend: error checks, the device memory pool, the per-backend device
// context (device, stream, cuBLAS handle, pool) and the resident weights.
#include "gpu/cuda/cuda_backend.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dls::gpu::cuda {

using bf16 = __nv_bfloat16;

[[noreturn]] void fail(const std::string& call, const char* file, int line, const std::string& what);

inline void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) fail(call, file, line, std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e));
}
inline void check(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail(call, file, line, std::string(cublasGetStatusName(s)) + ": " + cublasGetStatusString(s));
}

}  // namespace dls::gpu::cuda

/// Checks a CUDA runtime or cuBLAS call; throws cuda_error naming the call.
#define DLS_CUDA(call) ::dls::gpu::cuda::check((call), #call, __FILE__, __LINE__)
/// Checks the launch of the kernel just enqueued (configuration and launch errors).
#define DLS_LAUNCHED(kernel_name) ::dls::gpu::cuda::check(cudaGetLastError(), kernel_name, __FILE__, __LINE__)

namespace dls::gpu::cuda {

/// Makes `device` current for the scope and restores the previous one.
class device_guard {
 public:
  explicit device_guard(int device);
  ~device_guard();
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int prev_ = -1;
  int dev_ = -1;
};

/// A caching pool of plain cudaMalloc blocks on one device (never managed memory). Freed
/// blocks are kept by size and reused; on an out-of-memory error the cache is released and
/// the allocation retried once. `stream` (may be null) is synchronised before a block goes
/// back to the cache, so a block is never handed out while queued work still uses it.
class device_pool {
 public:
  device_pool(int device, cudaStream_t stream);
  ~device_pool();
  device_pool(const device_pool&) = delete;
  device_pool& operator=(const device_pool&) = delete;

  void* allocate(std::size_t bytes);
  void release(void* p, std::size_t bytes) noexcept;
  /// Frees every cached block.
  void trim() noexcept;
  std::size_t bytes_in_use() const;
  std::size_t bytes_cached() const;
  int device() const { return device_; }
  static std::size_t round(std::size_t bytes);

 private:
  int device_;
  cudaStream_t stream_;
  mutable std::mutex mu_;
  std::multimap<std::size_t, void*> free_;
  std::size_t in_use_ = 0, cached_ = 0;
};

/// A block from a pool, returned on destruction. grow() reallocates (contents are lost) when
/// more bytes are needed.
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::shared_ptr<device_pool> pool) : pool_(std::move(pool)) {}
  device_buffer(std::shared_ptr<device_pool> pool, std::size_t bytes);
  ~device_buffer() { reset(); }
  device_buffer(device_buffer&& o) noexcept;
  device_buffer& operator=(device_buffer&& o) noexcept;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  void grow(std::size_t bytes);
  void reset() noexcept;
  std::size_t bytes() const { return bytes_; }
  void* get() const { return p_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  std::shared_ptr<device_pool> pool_;
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

/// What a backend and the KV caches it made share: the device, one stream, cuBLAS, a pool.
struct device_context {
  explicit device_context(int device);
  ~device_context();
  device_context(const device_context&) = delete;
  device_context& operator=(const device_context&) = delete;

  int device;
  int sm_count = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::shared_ptr<device_pool> pool;
  device_buffer blas_workspace;
};

struct layer_weights_dev {
  const float* attn_norm = nullptr;
  const float* ff_norm = nullptr;
  const bf16* q = nullptr;     // [d, d]
  const bf16* k = nullptr;     // [kv, d]
  const bf16* v = nullptr;     // [kv, d]
  const bf16* o = nullptr;     // [d, d]
  const bf16* gate = nullptr;  // [ff, d]
  const bf16* up = nullptr;    // [ff, d]
  const bf16* down = nullptr;  // [d, ff]
  const float* q_bias = nullptr;  // [d]  (Dream; null without QKV bias)
  const float* k_bias = nullptr;  // [kv]
  const float* v_bias = nullptr;  // [kv]
};

}  // namespace dls::gpu::cuda

namespace dls::gpu {

class cuda_weights {
 public:
  model_config config;
  int device = 0;
  std::string source;
  const cuda::bf16* wte = nullptr;   // [V, d]
  const float* ln_f = nullptr;       // [d]
  const cuda::bf16* head = nullptr;  // [V, d]; wte itself when the head is tied
  std::vector<cuda::layer_weights_dev> layers;
  std::shared_ptr<cuda::device_pool> pool;
  cuda::device_buffer storage;
};

}  // namespace dls::gpu
