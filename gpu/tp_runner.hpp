#pragma once
// A tensor-parallel group of k CPU device slots in one process, without actors: rank 0 runs
// on the caller's thread and ranks 1..k-1 on their own threads, in lockstep through the
// shared-memory all-reduce. Used by benchmarks and parity tests; the runtime's worker
// actors drive per-rank engines the same way.
#include "gpu/allreduce.hpp"
#include "gpu/engine.hpp"
#include "gpu/model.hpp"

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dls::gpu {

class tp_runner {
 public:
  tp_runner(std::shared_ptr<const model> m, int world);
  ~tp_runner();
  tp_runner(const tp_runner&) = delete;
  tp_runner& operator=(const tp_runner&) = delete;

  int world() const { return world_; }
  /// Places a copy of `c` on every rank; returns its handle.
  std::size_t admit(const canvas& c);
  /// Frees the request's canvas and cache on every rank; its handle may not be stepped again.
  /// A caller that admits many requests over time gets their memory back, as a worker does
  /// when a request ends, instead of touching fresh pages at every refresh.
  void release(std::size_t handle);
  /// One step of the listed requests on all ranks; reports come from rank 0. `layer_limits`
  /// as in engine::step (every rank runs the same layer ranges).
  std::vector<step_report> step(const std::vector<std::size_t>& handles, const std::vector<int>& layer_limits = {});
  /// Rank 0's copy (all ranks hold identical canvases).
  const canvas& view(std::size_t handle) const { return slots_[0][handle].c; }
  const canvas& view(int rank, std::size_t handle) const {
    return slots_[static_cast<std::size_t>(rank)][handle].c;
  }
  /// Rank `rank`'s slot (its KV shard moves on its own when a request changes TP degree).
  request_slot& slot(int rank, std::size_t handle) { return slots_[static_cast<std::size_t>(rank)][handle]; }
  engine& rank_engine(int rank) { return *engines_[static_cast<std::size_t>(rank)]; }

 private:
  void run_rank(int rank);
  int world_;
  shm_allreduce_group group_;
  std::vector<std::unique_ptr<allreduce>> endpoints_;
  std::vector<std::unique_ptr<engine>> engines_;
  std::vector<std::vector<request_slot>> slots_;  // [rank][handle]
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<std::size_t> job_;
  std::vector<int> job_limits_;
  std::vector<std::vector<step_report>> results_;
  std::vector<std::string> errors_;
};

}  // namespace dls::gpu
