#pragma once
// What a node's workers compute on: CPU core slots or CUDA devices. The pool holds the model's
// weights once per device (all workers of a device, and every TP group they form after a
// regroup, share them), makes each TP group's collective (shared memory on the CPU, NCCL on
// GPUs) and each worker's engine backend. The only place the runtime chooses a backend.
#include "gpu/allreduce.hpp"
#include "gpu/backend.hpp"
#include "gpu/model.hpp"
#include "runtime/cluster_config.hpp"

#include <memory>
#include <string>
#include <vector>

namespace dls::gpu {
class nccl_group;
class cuda_weights;
}  // namespace dls::gpu

namespace dls::actors {

/// One TP group's collective, shared by its workers for as long as the group lives.
struct group_link {
  int world = 1;
  std::shared_ptr<gpu::shm_allreduce_group> shm;  // cpu
  std::shared_ptr<gpu::nccl_group> nccl;          // cuda with world > 1
};

class device_pool {
 public:
  /// Opens the node's devices for `m`: for `cuda`, checks that this build has the CUDA backend
  /// and that every listed device exists, then uploads the weights to each. Throws
  /// std::runtime_error with one line naming what is missing.
  static std::shared_ptr<const device_pool> open(const runtime::device_spec& devices, std::shared_ptr<const gpu::model> m);

  const std::string& kind() const { return kind_; }
  /// Why this pool's backends cannot decode with `p` ("" when they can). The engine would refuse
  /// such a request only at its first step, which fails every request batched with it, so a
  /// group asks at admission: a client's sampler options must not break other clients' answers.
  std::string cannot_decode(const gpu::decode_params& p) const;
  int slots() const { return static_cast<int>(ids_.size()); }
  /// "cpu:0", or "cuda:3" with the GPU's name.
  std::string describe(int slot) const;
  /// The collective of a TP group over `slots` (indices into the node's device list).
  std::shared_ptr<group_link> link_for(const std::vector<int>& slots) const;
  /// The backend of rank `rank` of the group `link`, on device slot `slot`. For the CPU,
  /// `endpoint` receives the rank's all-reduce endpoint, which must outlive the backend.
  std::unique_ptr<gpu::backend> make_backend(int slot, int rank, const group_link& link,
                                             std::unique_ptr<gpu::allreduce>& endpoint) const;

 private:
  std::string kind_;
  std::vector<int> ids_;  // cuda: device ids; cpu: 0..count-1
  std::vector<std::string> names_;
  std::shared_ptr<const gpu::model> model_;
  std::vector<std::shared_ptr<const gpu::cuda_weights>> weights_;  // cuda: per slot
};

}  // namespace dls::actors
