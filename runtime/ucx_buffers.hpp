#pragma once
// Receive buffers for the UCX data plane, registered with the UCP context once and reused:
// a rendezvous lands directly in them, and a transfer of a size seen before costs neither a
// fresh allocation (page faults) nor a fresh registration. Buffers go back to the pool when
// the last holder of the payload drops it, from any thread.
#include <ucp/api/ucp.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>
#include <vector>

namespace dls::runtime {

/// Bytes that arrived over UCX (or were handed over in-process); the holder keeps them alive.
struct ucx_payload {
  std::shared_ptr<const void> owner;
  const char* data = nullptr;
  std::size_t size = 0;
  std::string_view view() const { return {data, size}; }
};

class ucx_buffer_pool : public std::enable_shared_from_this<ucx_buffer_pool> {
 public:
  struct buffer {
    char* data = nullptr;
    std::size_t size = 0;
    ucp_mem_h memh = nullptr;
  };

  /// `idle_limit_bytes`: free buffers kept beyond this are unmapped and released.
  ucx_buffer_pool(ucp_context_h ctx, std::size_t idle_limit_bytes);
  ~ucx_buffer_pool();

  /// A registered buffer of exactly `size` bytes (contents undefined); throws std::runtime_error.
  buffer take(std::size_t size);
  /// Gives a taken buffer back (thread-safe).
  void give(buffer b);
  /// Wraps a taken buffer as a payload that returns it here when the last copy is dropped.
  ucx_payload as_payload(buffer b, std::size_t size);
  /// Deregisters everything before the context goes; buffers still held are freed on release.
  void close();

 private:
  void release(buffer& b);

  std::mutex mu_;
  ucp_context_h ctx_;
  std::size_t idle_limit_;
  std::size_t idle_bytes_ = 0;
  bool closed_ = false;
  std::multimap<std::size_t, buffer> idle_;
  std::set<ucp_mem_h> taken_;  // registered and held outside the pool
};

}  // namespace dls::runtime
