#include "runtime/ucx_lent.hpp"

namespace dls::runtime {

ucx_payload ucx_lent_buffers::lend(void* data, std::size_t size) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++held_;
  }
  // If the control block cannot be allocated, shared_ptr calls the deleter itself: the buffer
  // is queued for release and the exception goes to the caller.
  std::shared_ptr<const void> owner(data, [self = shared_from_this()](const void* p) {
    self->dropped(const_cast<void*>(p));
  });
  return {std::move(owner), static_cast<const char*>(data), size};
}

void ucx_lent_buffers::dropped(void* data) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ctx_) {
    ucp_am_data_release(worker_, data);
    if (--held_ == 0) destroy_worker();
    return;
  }
  dropped_.push_back(data);
  any_dropped_.store(true, std::memory_order_release);
  // The first drop since the last release wakes the progress thread (callable from any thread;
  // a system call each time, so the drops after it ride along); teardown waits on cv_ instead.
  if (dropped_.size() == 1) {
    ucp_worker_signal(worker_);
    cv_.notify_all();
  }
}

void ucx_lent_buffers::release_dropped() {
  if (!any_dropped_.load(std::memory_order_acquire)) return;
  std::vector<void*> now;
  {
    std::lock_guard<std::mutex> lock(mu_);
    any_dropped_.store(false, std::memory_order_relaxed);
    if (dropped_.empty()) return;
    now.swap(dropped_);
    held_ -= now.size();
  }
  for (void* p : now) ucp_am_data_release(worker_, p);
}

bool ucx_lent_buffers::wait_all_dropped(std::chrono::steady_clock::time_point until) {
  for (;;) {
    release_dropped();
    std::unique_lock<std::mutex> lock(mu_);
    if (held_ == 0) return true;
    if (!dropped_.empty()) continue;
    if (cv_.wait_until(lock, until, [&] { return !dropped_.empty(); })) continue;
    return false;
  }
}

void ucx_lent_buffers::hand_over_worker(ucp_context_h ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  ctx_ = ctx;
  for (void* p : dropped_) ucp_am_data_release(worker_, p);
  held_ -= dropped_.size();
  dropped_.clear();
  if (held_ == 0) destroy_worker();
}

void ucx_lent_buffers::destroy_worker() {
  ucp_worker_destroy(worker_);
  ucp_cleanup(ctx_);
  worker_ = nullptr;
}

std::size_t ucx_lent_buffers::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

}  // namespace dls::runtime
