#include "runtime/ucx_frame.hpp"

// Inlined so the hash is compiled for this target's vector units (the shared library is
// built for baseline x86-64): it runs over every byte of every transfer twice.
// GCC 12 warns that xxhash's AVX-512 accumulator reads an uninitialized operand (the masked
// shuffle intrinsics' "don't care" input) once -march=native enables AVX-512: a false positive
// in system headers, silenced for their lines only (the intrinsics are first included here).
#define XXH_INLINE_ALL
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <xxhash.h>
#pragma GCC diagnostic pop
#else
#include <xxhash.h>
#endif

#include <algorithm>
#include <cstring>

namespace dls::runtime {

uint64_t frame_checksum(const char* data, std::size_t n) { return XXH3_64bits(data, n); }

uint32_t parts_for(std::size_t size, std::size_t part_bytes) {
  if (part_bytes == 0 || size <= part_bytes) return 1;
  return static_cast<uint32_t>((size + part_bytes - 1) / part_bytes);
}

ucx_frame_header make_part_geometry(uint64_t transfer_id, uint64_t total, std::size_t part_bytes, uint32_t part,
                                    uint32_t parts) {
  ucx_frame_header h;
  h.transfer_id = transfer_id;
  h.total = total;
  h.part = part;
  h.parts = parts;
  h.offset = parts == 1 ? 0 : static_cast<uint64_t>(part) * part_bytes;
  h.bytes = parts == 1 ? total : std::min<uint64_t>(part_bytes, total - h.offset);
  return h;
}

ucx_frame_header make_part_header(uint64_t transfer_id, std::string_view whole, std::size_t part_bytes, uint32_t part,
                                  uint32_t parts) {
  auto h = make_part_geometry(transfer_id, whole.size(), part_bytes, part, parts);
  h.checksum = XXH3_64bits(whole.data() + h.offset, static_cast<std::size_t>(h.bytes));
  return h;
}

ucx_frame_header make_frame_header(uint64_t transfer_id, std::string_view payload) {
  return make_part_header(transfer_id, payload, 0, 0, 1);
}

std::string check_frame_header(const void* header, std::size_t header_length, std::size_t payload_length) {
  if (header_length != sizeof(ucx_frame_header))
    return "ucx transfer refused: header of " + std::to_string(header_length) + " bytes, expected " +
           std::to_string(sizeof(ucx_frame_header));
  ucx_frame_header h;
  std::memcpy(&h, header, sizeof h);
  if (h.magic != ucx_frame_header::magic_value) return "ucx transfer refused: bad magic (not a DiLaServe frame)";
  const auto id = "ucx transfer " + std::to_string(h.transfer_id) + " refused: ";
  if (h.version != ucx_frame_header::current_version)
    return id + "frame version " + std::to_string(h.version) + ", this build speaks " +
           std::to_string(ucx_frame_header::current_version);
  if (h.sealed > 1 || h.reserved != 0) return id + "unknown frame flags";
  if (h.parts == 0 || h.parts > ucx_max_parts || h.part >= h.parts)
    return id + "part " + std::to_string(h.part) + " of " + std::to_string(h.parts) + " is not a part";
  // Subtractions only: offset + bytes could wrap.
  if (h.offset > h.total || h.bytes > h.total - h.offset || (h.parts == 1 && (h.offset != 0 || h.bytes != h.total)))
    return id + "part " + std::to_string(h.part) + " at byte " + std::to_string(h.offset) + " with " +
           std::to_string(h.bytes) + " bytes does not fit a transfer of " + std::to_string(h.total);
  if (payload_length != h.bytes)
    return id + (payload_length < h.bytes ? "truncated, " : "too long, ") + std::to_string(payload_length) + " of " +
           std::to_string(h.bytes) + " bytes";
  return {};
}

std::string check_frame_payload(const ucx_frame_header& h, std::string_view payload) {
  if (payload.size() != h.bytes)
    return "ucx transfer " + std::to_string(h.transfer_id) + " refused: truncated, " + std::to_string(payload.size()) +
           " of " + std::to_string(h.bytes) + " bytes";
  if (XXH3_64bits(payload.data(), payload.size()) != h.checksum)
    return "ucx transfer " + std::to_string(h.transfer_id) + " refused: checksum mismatch over " +
           std::to_string(h.bytes) + " bytes" + (h.parts > 1 ? " of part " + std::to_string(h.part) : std::string()) +
           " (corrupt)";
  return {};
}

}  // namespace dls::runtime
