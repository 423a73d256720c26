#pragma once
// The backend-neutral wire format of one shard's KV cache, so a cache exported by one backend
// imports into another (CPU <-> CUDA): int32 layers, rows, width, then K and V as f32,
// each [layer][row][width].
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace dls::gpu {

struct kv_dims {
  int32_t layers = 0, rows = 0, width = 0;
  std::size_t count() const {
    return static_cast<std::size_t>(layers) * static_cast<std::size_t>(rows) * static_cast<std::size_t>(width);
  }
};

constexpr std::size_t kv_header_bytes = 12;

/// A buffer of the right size with the header written; K starts at kv_header_bytes and V
/// count() floats after it.
inline std::string kv_wire_buffer(const kv_dims& d) {
  std::string out(kv_header_bytes + 2 * d.count() * sizeof(float), '\0');
  const int32_t dims[3] = {d.layers, d.rows, d.width};
  std::memcpy(&out[0], dims, kv_header_bytes);
  return out;
}

/// Reads and checks the header against the buffer size; throws std::invalid_argument.
inline kv_dims parse_kv_wire(const std::string& bytes) {
  if (bytes.size() < kv_header_bytes) throw std::invalid_argument("kv cache bytes truncated at byte 0");
  int32_t dims[3];
  std::memcpy(dims, bytes.data(), kv_header_bytes);
  if (dims[0] < 0 || dims[1] < 0 || dims[2] < 0) throw std::invalid_argument("kv cache bytes: negative dimension");
  kv_dims d{dims[0], dims[1], dims[2]};
  const std::size_t payload = bytes.size() - kv_header_bytes;
  const auto mismatch = [] { return std::invalid_argument("kv cache bytes: size does not match its dimensions"); };
  if (d.layers == 0 || d.rows == 0 || d.width == 0) {
    if (payload != 0) throw mismatch();
    return d;
  }
  // Bounded by what the buffer holds before multiplying: the product of three int32 dimensions
  // can wrap around size_t and match a small buffer, which the importer would then overread.
  const std::size_t most = payload / (2 * sizeof(float));
  std::size_t count = 1;
  for (int32_t x : dims) {
    if (static_cast<std::size_t>(x) > most / count) throw mismatch();
    count *= static_cast<std::size_t>(x);
  }
  if (payload != 2 * count * sizeof(float)) throw mismatch();
  return d;
}

}  // namespace dls::gpu
