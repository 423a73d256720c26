#include "runtime/ucx_frame.hpp"

// Inlined so the hash is compiled for this target's vector units (the shared library is
// built for baseline x86-64): it runs over every byte of every transfer twice.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>

namespace dls::runtime {

ucx_frame_header make_frame_header(uint64_t transfer_id, std::string_view payload) {
  ucx_frame_header h;
  h.transfer_id = transfer_id;
  h.bytes = payload.size();
  h.checksum = XXH3_64bits(payload.data(), payload.size());
  return h;
}

std::string check_frame_header(const void* header, std::size_t header_length, std::size_t payload_length) {
  if (header_length != sizeof(ucx_frame_header))
    return "ucx transfer refused: header of " + std::to_string(header_length) + " bytes, expected " +
           std::to_string(sizeof(ucx_frame_header));
  ucx_frame_header h;
  std::memcpy(&h, header, sizeof h);
  if (h.magic != ucx_frame_header::magic_value) return "ucx transfer refused: bad magic (not a DiLaServe frame)";
  if (h.version != ucx_frame_header::current_version)
    return "ucx transfer " + std::to_string(h.transfer_id) + " refused: frame version " + std::to_string(h.version) +
           ", this build speaks " + std::to_string(ucx_frame_header::current_version);
  if (payload_length != h.bytes)
    return "ucx transfer " + std::to_string(h.transfer_id) + " refused: " +
           (payload_length < h.bytes ? "truncated, " : "too long, ") + std::to_string(payload_length) + " of " +
           std::to_string(h.bytes) + " bytes";
  return {};
}

std::string check_frame_payload(const ucx_frame_header& h, std::string_view payload) {
  if (payload.size() != h.bytes)
    return "ucx transfer " + std::to_string(h.transfer_id) + " refused: truncated, " + std::to_string(payload.size()) +
           " of " + std::to_string(h.bytes) + " bytes";
  if (XXH3_64bits(payload.data(), payload.size()) != h.checksum)
    return "ucx transfer " + std::to_string(h.transfer_id) + " refused: checksum mismatch over " +
           std::to_string(h.bytes) + " bytes (corrupt)";
  return {};
}

}  // namespace dls::runtime
