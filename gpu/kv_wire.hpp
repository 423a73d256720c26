#pragma once
// The backend-neutral wire format of one shard's KV cache, so a cache exported by one backend
// imports into another (CPU <-> CUDA): int32 layers, rows, width and dtype, then K and V,
// each [layer][row][width], in the cache's own element type (f32 on the CPU, bf16 on CUDA),
// so a move between like backends neither converts nor doubles the bytes.
#include "gpu/dtype.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dls::gpu {

enum class kv_dtype : int32_t { f32 = 0, bf16 = 1 };

inline std::size_t kv_element_bytes(kv_dtype t) { return t == kv_dtype::f32 ? 4 : 2; }
inline const char* kv_dtype_name(kv_dtype t) { return t == kv_dtype::f32 ? "f32" : "bf16"; }

struct kv_dims {
  int32_t layers = 0, rows = 0, width = 0;
  kv_dtype dtype = kv_dtype::f32;
  std::size_t count() const {
    return static_cast<std::size_t>(layers) * static_cast<std::size_t>(rows) * static_cast<std::size_t>(width);
  }
  /// Bytes of K (and of V) after the header.
  std::size_t plane_bytes() const { return count() * kv_element_bytes(dtype); }
};

constexpr std::size_t kv_header_bytes = 16;

/// A buffer of the right size with the header written; K starts at kv_header_bytes and V
/// plane_bytes() after it.
inline std::string kv_wire_buffer(const kv_dims& d) {
  std::string out(kv_header_bytes + 2 * d.plane_bytes(), '\0');
  const int32_t head[4] = {d.layers, d.rows, d.width, static_cast<int32_t>(d.dtype)};
  std::memcpy(&out[0], head, kv_header_bytes);
  return out;
}

/// Reads and checks the header against the buffer size; throws std::invalid_argument.
inline kv_dims parse_kv_wire(std::string_view bytes) {
  if (bytes.size() < kv_header_bytes)
    throw std::invalid_argument("kv cache bytes truncated: " + std::to_string(bytes.size()) + " bytes, the header alone is " +
                                std::to_string(kv_header_bytes));
  int32_t head[4];
  std::memcpy(head, bytes.data(), kv_header_bytes);
  if (head[0] < 0 || head[1] < 0 || head[2] < 0) throw std::invalid_argument("kv cache bytes: negative dimension");
  if (head[3] != static_cast<int32_t>(kv_dtype::f32) && head[3] != static_cast<int32_t>(kv_dtype::bf16))
    throw std::invalid_argument("kv cache bytes: unknown dtype code " + std::to_string(head[3]) + " (0 f32, 1 bf16)");
  kv_dims d{head[0], head[1], head[2], static_cast<kv_dtype>(head[3])};
  const std::size_t payload = bytes.size() - kv_header_bytes;
  const auto mismatch = [&] {
    return std::invalid_argument("kv cache bytes: " + std::to_string(payload) + " payload bytes do not match " +
                                 std::to_string(d.layers) + "x" + std::to_string(d.rows) + "x" + std::to_string(d.width) +
                                 " " + kv_dtype_name(d.dtype) + " K and V");
  };
  if (d.layers == 0 || d.rows == 0 || d.width == 0) {
    if (payload != 0) throw mismatch();
    return d;
  }
  // Bounded by what the buffer holds before multiplying: the product of three int32 dimensions
  // can wrap around size_t and match a small buffer, which the importer would then overread.
  const std::size_t most = payload / (2 * kv_element_bytes(d.dtype));
  std::size_t count = 1;
  for (int i = 0; i < 3; ++i) {
    const auto x = static_cast<std::size_t>(head[i]);
    if (x > most / count) throw mismatch();
    count *= x;
  }
  if (payload != 2 * d.plane_bytes()) throw mismatch();
  return d;
}

/// Copies plane `which` (0 K, 1 V) of a parsed buffer into `out` as f32, converting bf16.
inline void read_kv_plane(std::string_view bytes, const kv_dims& d, int which, float* out) {
  const char* src = bytes.data() + kv_header_bytes + static_cast<std::size_t>(which) * d.plane_bytes();
  const std::size_t n = d.count();
  if (d.dtype == kv_dtype::f32) {
    std::memcpy(out, src, n * sizeof(float));
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = bf16_to_f32(h);
  }
}

/// Copies plane `which` into `out` as bf16 (round to nearest even from f32).
inline void read_kv_plane(std::string_view bytes, const kv_dims& d, int which, uint16_t* out) {
  const char* src = bytes.data() + kv_header_bytes + static_cast<std::size_t>(which) * d.plane_bytes();
  const std::size_t n = d.count();
  if (d.dtype == kv_dtype::bf16) {
    std::memcpy(out, src, n * sizeof(uint16_t));
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, src + 4 * i, 4);
    out[i] = f32_to_bf16(f);
  }
}

}  // namespace dls::gpu
