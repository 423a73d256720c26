#pragma once
// Memory that is written in full as soon as it is allocated (a random model's f32 weights) is not
// refused by the allocation when the host lacks it: the OOM killer ends the process, or the host's
// other processes are pushed out first. These check a size against the memory available before.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace dls::gpu {

/// The memory the kernel can give without swapping (/proc/meminfo's MemAvailable), 0 if unknown.
inline std::uint64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

/// Throws std::invalid_argument naming `what` when `bytes` exceed the memory available now.
inline void require_memory(std::uint64_t bytes, const std::string& what) {
  const auto available = available_memory_bytes();
  if (available == 0 || bytes <= available) return;
  char text[96];
  std::snprintf(text, sizeof text, " needs %.1f GB of memory, but this host has %.1f GB available",
                static_cast<double>(bytes) / 1e9, static_cast<double>(available) / 1e9);
  throw std::invalid_argument(what + text);
}

}  // namespace dls::gpu
