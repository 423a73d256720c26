#include "gpu/allreduce.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

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

namespace {

// How long a rank spins for the others before it sleeps. With a core each, the ranks of a
// balanced step arrive within a few microseconds of one another, so spinning answers at once.
// On a host with more device slots than cores (or other work on them), the rank it waits for
// may be descheduled for a scheduler slice (milliseconds), and a spinning or yielding waiter
// would hold the very core that rank needs; after this long it sleeps and frees it. Measured
// on two cores (docs/performance.md, "TP barriers on a shared host"): 3 us slowed a lone TP-2
// step (reuse 1.4x), 50 us left two TP-2 groups sharing the cores 1.7-2.5x slower than 10 us.
constexpr auto spin_before_sleep = std::chrono::microseconds(10);

}  // namespace

// Sense-reversing barrier: spin while the others are likely running, then sleep until the
// last rank opens it. The sleep path is a mutex and condition variable; the last rank takes the
// mutex only when someone sleeps, so a barrier without sleepers costs no system call.
void shm_allreduce_group::barrier(int& local_sense) {
  local_sense ^= 1;
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == world_) {
    arrived_.store(0, std::memory_order_relaxed);
    // seq_cst on the store and on the sleepers' count (here and in the sleeper): either this
    // rank sees a sleeper and wakes it, or the sleeper sees the barrier open and never waits.
    sense_.store(local_sense, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard<std::mutex> lk(sleep_mutex_); }
      opened_.notify_all();
    }
    return;
  }
  const auto spin_until = std::chrono::steady_clock::now() + spin_before_sleep;
  unsigned spins = 0;
  while (sense_.load(std::memory_order_acquire) != local_sense) {
#if defined(__x86_64__)
    _mm_pause();
#endif
    // The clock is read every 64 pauses (a few microseconds), not at every one.
    if ((++spins & 63u) != 0 || std::chrono::steady_clock::now() < spin_until) continue;
    std::unique_lock<std::mutex> lk(sleep_mutex_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    opened_.wait(lk, [&] { return sense_.load(std::memory_order_seq_cst) == local_sense; });
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
}

}  // namespace dls::gpu
