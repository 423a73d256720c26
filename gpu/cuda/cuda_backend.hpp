#pragma once
// The CUDA backend: the same `backend` interface as the CPU one (gpu/backend.hpp), with bf16
// weights resident on the device, KV cache slots in device memory, cuBLAS GEMMs (bf16 inputs,
// fp32 accumulation), fused kernels for RMSNorm, RoPE, attention, SwiGLU and the vocabulary
// argmax, and NCCL all-reduce for tensor parallelism. See docs/cuda.md.
//
// This header is plain C++: no CUDA types, so non-CUDA code (the CLI, the runtime) can include
// it. Users of the target dls_gpu_cuda get the compile definition DLS_HAVE_CUDA=1.
#include "gpu/backend.hpp"
#include "gpu/model.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dls::gpu {

/// Thrown for every failed CUDA runtime, cuBLAS or NCCL call and every failed kernel launch;
/// the message names the call, the source location and the library's error name and text.
class cuda_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Usable CUDA devices. 0 when there is no GPU, no driver, or the driver is too old; never
/// throws and never aborts.
int cuda_device_count() noexcept;

/// One line about a device: "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)". Throws cuda_error.
std::string cuda_device_description(int device);

/// A model's weights resident in bf16 on one device (norm weights stay f32). Several backends
/// on the same device share one copy, so a TP regroup moves no weights: every device holds
/// the full model and a shard only selects its slices.
class cuda_weights;

/// Uploads `m` (f32 on the host) to `device`, rounding to bf16 (nearest even).
std::shared_ptr<const cuda_weights> upload_weights(const model& m, int device);

/// Deterministic random bf16 weights generated on the device by a hash-based init kernel
/// (uniform with standard deviation 1/sqrt(fan-in), norms 1): the LLaDA-8B benchmark shape
/// without materialising 32 GB of f32 on the host.
std::shared_ptr<const cuda_weights> make_random_cuda_weights(const model_config& cfg, uint64_t seed, int device);

const model_config& weights_config(const cuda_weights& w);
int weights_device(const cuda_weights& w);
/// Device bytes of the resident weights.
std::size_t weights_bytes(const cuda_weights& w);

/// The NCCL communicators of one TP group. Destroy it and make a new one when the runtime
/// splits or merges groups; communicators are never reused across groups.
class nccl_group {
 public:
  /// Every rank in this process: rank r on devices[r] (ncclCommInitAll).
  explicit nccl_group(const std::vector<int>& devices);
  /// One rank of a group spanning processes; every rank passes the same id (from
  /// make_unique_id() on one of them, sent over the control plane).
  nccl_group(const std::string& unique_id, int world, int rank, int device);
  ~nccl_group();
  nccl_group(const nccl_group&) = delete;
  nccl_group& operator=(const nccl_group&) = delete;

  static std::string make_unique_id();
  /// False when the build found no NCCL (tensor parallelism on GPUs is then unavailable).
  static bool available();

  int world() const;
  bool has_rank(int rank) const;
  int device(int rank) const;

  struct impl;
  impl& internals() const { return *p_; }

 private:
  std::unique_ptr<impl> p_;
};

/// Which attention kernel runs. `automatic` picks the mma.sync flash kernel (FlashAttention-2
/// style, S/P/O in registers) for head dims 32, 64, 96 and 128, else the WMMA flash kernel for
/// 32/64/128 (none left), else the scalar flash kernel (any even head dim up to 256).
enum class cuda_attention : uint8_t { automatic, mma, tensor_core, scalar };

struct cuda_backend_options {
  shard_spec shard{};
  nccl_group* group = nullptr;  // required when shard.world > 1; must outlive the backend
  cuda_attention attention = cuda_attention::automatic;
  int max_kv_splits = 16;       // flash-decoding splits of the key range for short query sets
  /// Replay each step shape as a CUDA graph from its second occurrence on (TP = 1 only): a
  /// LLaDA-8B step is ~450 kernel launches, which otherwise cost more host time than a
  /// reuse step's GPU time.
  bool graphs = true;
  /// Time every phase of each forward() with CUDA events (eager, no graphs); read the last
  /// step's times with cuda_step_phases(). For diagnosis: the events cost a little time.
  bool profile_phases = false;
};

/// A backend on the weights' device. For world > 1, every rank calls forward() on the same
/// batch at the same time from its own thread (as with the CPU backend).
std::unique_ptr<backend> make_cuda_backend(std::shared_ptr<const cuda_weights> w,
                                           const cuda_backend_options& options = {});
/// The last forward()'s GPU time per phase (embed, norms, GEMMs, RoPE, attention, SwiGLU,
/// all-reduce, head, proposals), in seconds, summed over layers, in forward order. Empty unless
/// `b` is a CUDA backend made with profile_phases.
std::vector<std::pair<std::string, double>> cuda_step_phases(const backend& b);

/// Convenience: uploads `m` to `device` first.
std::unique_ptr<backend> make_cuda_backend(const model& m, int device, const cuda_backend_options& options = {});

}  // namespace dls::gpu
