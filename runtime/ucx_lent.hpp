#pragma once
// Eager buffers that UCX lends the receiver instead of a copy. An eager message that arrived in
// fragments is already whole in memory UCX allocated; a receiver that answers UCS_INPROGRESS
// keeps that memory until it calls ucp_am_data_release, so the payload can point into it and
// save the copy into a pool buffer (at 1 MiB over shared memory that copy was a third of the
// receiver's time). The release must run on the worker's thread, and the payload may be dropped
// on any thread, so drops are queued here and the progress thread hands them back.
#include "runtime/ucx_buffers.hpp"

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace dls::runtime {

class ucx_lent_buffers : public std::enable_shared_from_this<ucx_lent_buffers> {
 public:
  explicit ucx_lent_buffers(ucp_worker_h worker) : worker_(worker) {}

  /// A payload over `data`, which UCX lent (the AM callback then returns UCS_INPROGRESS);
  /// dropping its last copy queues `data` for release_dropped.
  ucx_payload lend(void* data, std::size_t size);

  /// On the worker's thread: gives UCX back every buffer dropped so far.
  void release_dropped();

  /// Teardown, on the thread that owns the worker now: releases drops as they come until no
  /// lent buffer is held, or until `until`. True when none is held (the worker may go).
  bool wait_all_dropped(std::chrono::steady_clock::time_point until);

  /// After a failed wait the worker must outlive its last lent buffer: the caller hands it over
  /// with its context, later drops release at once (nothing else touches the worker then, and
  /// this object serializes them), and the last one destroys the worker and then the context.
  void hand_over_worker(ucp_context_h ctx);

  std::size_t held() const;

 private:
  void dropped(void* data);
  void destroy_worker();  // with mu_ held, once nothing is lent

  ucp_worker_h worker_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<void*> dropped_;
  // Whether dropped_ may hold something: the progress loop asks every pass, without the lock.
  std::atomic<bool> any_dropped_{false};
  std::size_t held_ = 0;
  ucp_context_h ctx_ = nullptr;  // set by hand_over_worker: the holders own the worker now
};

}  // namespace dls::runtime
