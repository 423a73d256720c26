#include "runtime/ucx_buffers.hpp"

#include <sys/mman.h>

#include <iterator>
#include <stdexcept>
#include <string>

namespace dls::runtime {

namespace {

char* map_pages(std::size_t size) {
  void* p = ::mmap(nullptr, size ? size : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("ucx: cannot allocate a receive buffer of " + std::to_string(size) + " bytes");
  return static_cast<char*>(p);
}

}  // namespace

ucx_buffer_pool::ucx_buffer_pool(ucp_context_h ctx, std::size_t idle_limit_bytes)
    : ctx_(ctx), idle_limit_(idle_limit_bytes) {}

ucx_buffer_pool::~ucx_buffer_pool() { close(); }

ucx_buffer_pool::buffer ucx_buffer_pool::take(std::size_t size) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) throw std::runtime_error("ucx: the transport is stopping");
    // The buffer given back last: it is the likeliest to be still in cache when the next
    // transfer lands in it.
    auto [first, last] = idle_.equal_range(size);
    if (first != last) {
      auto it = std::prev(last);
      buffer b = it->second;
      idle_.erase(it);
      idle_bytes_ -= size;
      taken_.insert(b.memh);
      return b;
    }
  }
  buffer b;
  b.size = size;
  b.data = map_pages(size);
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = b.data;
  mp.length = size ? size : 1;
  std::lock_guard<std::mutex> lock(mu_);
  if (ucs_status_t s = ucp_mem_map(ctx_, &mp, &b.memh); s != UCS_OK) {
    ::munmap(b.data, mp.length);
    throw std::runtime_error(std::string("ucx: cannot register a receive buffer: ") + ucs_status_string(s));
  }
  taken_.insert(b.memh);
  return b;
}

void ucx_buffer_pool::release(buffer& b) {
  if (b.memh && !closed_) ucp_mem_unmap(ctx_, b.memh);
  b.memh = nullptr;
  ::munmap(b.data, b.size ? b.size : 1);
  b.data = nullptr;
}

void ucx_buffer_pool::give(buffer b) {
  std::lock_guard<std::mutex> lock(mu_);
  taken_.erase(b.memh);
  if (closed_ || b.size > idle_limit_) {
    release(b);
    return;
  }
  // Oldest-sized first out: the pool keeps what the latest transfers needed.
  while (idle_bytes_ + b.size > idle_limit_ && !idle_.empty()) {
    auto it = idle_.begin();
    idle_bytes_ -= it->first;
    release(it->second);
    idle_.erase(it);
  }
  idle_bytes_ += b.size;
  idle_.emplace(b.size, b);
}

ucx_payload ucx_buffer_pool::as_payload(buffer b, std::size_t size) {
  auto self = shared_from_this();
  auto* raw = new buffer(b);
  std::shared_ptr<const void> owner(raw, [self](const void* p) {
    auto* held = static_cast<buffer*>(const_cast<void*>(p));
    self->give(*held);
    delete held;
  });
  return {std::move(owner), b.data, size};
}

void ucx_buffer_pool::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  for (auto& [size, b] : idle_) release(b);
  idle_.clear();
  idle_bytes_ = 0;
  // Buffers still held stay valid memory; only their registration ends with the context.
  for (auto memh : taken_) ucp_mem_unmap(ctx_, memh);
  taken_.clear();
  closed_ = true;
}

}  // namespace dls::runtime
