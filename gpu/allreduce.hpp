#pragma once
// The collective a tensor-parallel shard calls after attention and after the MLP. CPU device
// slots in one process use shared memory; the CUDA backend uses NCCL behind the same class.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace dls::gpu {

class allreduce {
 public:
  virtual ~allreduce() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  /// Sums `data[0..n)` elementwise across all ranks, in place; every rank ends with the
  /// same bits (the summation order is fixed), so TP ranks stay in lockstep.
  virtual void sum(float* data, std::size_t n) = 0;
};

/// Shared state of k threads reducing over shared memory. Make one per TP group, hand
/// endpoint(r) to the thread of rank r. Rebuilding a group (split/merge) makes a new one.
class shm_allreduce_group {
 public:
  explicit shm_allreduce_group(int world);
  std::unique_ptr<allreduce> endpoint(int rank);
  int world() const { return world_; }

 private:
  friend class shm_endpoint;
  void barrier(int& local_sense);
  int world_;
  std::vector<float*> buffers_;
  std::vector<float> scratch_;
  std::size_t n_ = 0;
  std::atomic<int> arrived_{0};
  std::atomic<int> sense_{0};
  // Ranks that stopped spinning and sleep until the barrier opens (see barrier()).
  std::atomic<int> sleepers_{0};
  std::mutex sleep_mutex_;
  std::condition_variable opened_;
};

}  // namespace dls::gpu
