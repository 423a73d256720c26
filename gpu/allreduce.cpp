#include "gpu/allreduce.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dls::gpu {

class shm_endpoint final : public allreduce {
 public:
  shm_endpoint(shm_allreduce_group& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int world() const override { return g_.world_; }

  void sum(float* data, std::size_t n) override {
    const int k = g_.world_;
    if (k == 1) return;
    g_.buffers_[static_cast<std::size_t>(rank_)] = data;
    if (rank_ == 0) {
      if (g_.scratch_.size() < n) g_.scratch_.resize(n);
      g_.n_ = n;
    }
    g_.barrier(sense_);  // all buffers published, scratch sized
    std::size_t lo = n * static_cast<std::size_t>(rank_) / static_cast<std::size_t>(k);
    std::size_t hi = n * static_cast<std::size_t>(rank_ + 1) / static_cast<std::size_t>(k);
    float* out = g_.scratch_.data();
    std::memcpy(out + lo, g_.buffers_[0] + lo, (hi - lo) * sizeof(float));
    for (int j = 1; j < k; ++j) {
      const float* src = g_.buffers_[static_cast<std::size_t>(j)];
      for (std::size_t i = lo; i < hi; ++i) out[i] += src[i];
    }
    g_.barrier(sense_);  // every slice reduced
    std::memcpy(data, out, n * sizeof(float));
    g_.barrier(sense_);  // nobody reuses scratch or its buffer before all copied
  }

 private:
  shm_allreduce_group& g_;
  int rank_;
  int sense_ = 0;
};

shm_allreduce_group::shm_allreduce_group(int world) : world_(world), buffers_(static_cast<std::size_t>(world)) {
  if (world < 1) throw std::invalid_argument("allreduce group needs at least one rank");
}

std::unique_ptr<allreduce> shm_allreduce_group::endpoint(int rank) {
  if (rank < 0 || rank >= world_) throw std::invalid_argument("allreduce rank out of range");
  return std::make_unique<shm_endpoint>(*this, rank);
}

// Sense-reversing barrier: spin briefly (ranks run on their own cores), then yield so an
// oversubscribed machine still makes progress.
void shm_allreduce_group::barrier(int& local_sense) {
  local_sense ^= 1;
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == world_) {
    arrived_.store(0, std::memory_order_relaxed);
    sense_.store(local_sense, std::memory_order_release);
    return;
  }
  int spins = 0;
  while (sense_.load(std::memory_order_acquire) != local_sense) {
    if (++spins < 4000) {
#if defined(__x86_64__)
      _mm_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace dls::gpu
