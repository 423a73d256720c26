#pragma once
// An allocator for the big buffers a CPU step streams through once per step (packed weights, KV
// caches): on 4 KiB pages every 4 KiB brings a TLB miss that hardware and software prefetches
// cannot hide. Buffers of 2 MiB and more are aligned to 2 MiB and advised onto transparent huge
// pages (Debian's default THP mode is "madvise", so without the advice they never get them).
#include <cstddef>
#include <cstdlib>
#include <new>

#include <sys/mman.h>

namespace dls::gpu::cpu {

template <class T>
struct huge_page_allocator {
  using value_type = T;
  static constexpr std::size_t huge = std::size_t{2} << 20;

  huge_page_allocator() = default;
  template <class U>
  huge_page_allocator(const huge_page_allocator<U>&) {}

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    const bool big = bytes >= huge;
    const std::size_t rounded = big ? (bytes + huge - 1) / huge * huge : bytes;
    void* p = nullptr;
    if (posix_memalign(&p, big ? huge : 64, rounded == 0 ? 64 : rounded) != 0) throw std::bad_alloc();
    if (big) madvise(p, rounded, MADV_HUGEPAGE);  // advice only: 4 KiB pages still work
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) { std::free(p); }

  template <class U>
  bool operator==(const huge_page_allocator<U>&) const { return true; }
  template <class U>
  bool operator!=(const huge_page_allocator<U>&) const { return false; }
};

}  // namespace dls::gpu::cpu
