#pragma once
// The header every UCX data-plane message carries as its active-message header: which
// transfer it belongs to, which part of it this is (a large buffer travels in parts, each
// hashed as it is sent and checked as it lands, so that hashing overlaps the transfer), how
// many bytes follow and their checksum, so a receiver refuses a truncated or corrupt buffer
// before anything imports it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dls::runtime {

struct ucx_frame_header {
  static constexpr uint32_t magic_value = 0x58534c44;  // "DLSX" in memory order
  static constexpr uint32_t current_version = 3;
  uint32_t magic = magic_value;
  uint32_t version = current_version;
  uint64_t transfer_id = 0;
  uint64_t bytes = 0;     // this part's payload length
  uint64_t checksum = 0;  // XXH3-64 of this part's payload; 0 when sealed
  uint64_t total = 0;     // the whole transfer's length
  uint64_t offset = 0;    // where this part starts in it
  uint32_t part = 0;      // 0 .. parts - 1
  uint32_t parts = 1;
  uint32_t sealed = 0;     // 1: the payload is AES-256-GCM ciphertext under salt, with tag
  uint32_t reserved = 0;   // 0
  uint8_t salt[16] = {};   // per part: its key is derived from the cluster's and this
  uint8_t tag[16] = {};    // GCM's tag over this header (tag zeroed) and the payload
};
static_assert(sizeof(ucx_frame_header) == 96, "the header is sent as it lies in memory");

/// The most parts one transfer may have: a header claiming more is not ours.
constexpr uint32_t ucx_max_parts = 1u << 20;

/// Where part `part` of `parts` of a buffer of `total` bytes lies, `part_bytes` each and the
/// last the rest; no checksum (a sealed part gets its tag instead).
ucx_frame_header make_part_geometry(uint64_t transfer_id, uint64_t total, std::size_t part_bytes, uint32_t part,
                                    uint32_t parts);

/// The header of a transfer sent whole (one part).
ucx_frame_header make_frame_header(uint64_t transfer_id, std::string_view payload);

/// The header of part `part` of `parts` of `whole`: `part_bytes` each, the last one the rest.
ucx_frame_header make_part_header(uint64_t transfer_id, std::string_view whole, std::size_t part_bytes, uint32_t part,
                                  uint32_t parts);

/// How many parts of `part_bytes` a buffer of `size` bytes travels in (1 when part_bytes is 0).
uint32_t parts_for(std::size_t size, std::size_t part_bytes);

/// The checksum of a payload sent in the clear (XXH3-64).
uint64_t frame_checksum(const char* data, std::size_t n);

/// Checks an arriving header (its length as UCX delivered it) and the payload length UCX
/// announced; returns "" or a one-line reason ("...: truncated, 100 of 4096 bytes").
std::string check_frame_header(const void* header, std::size_t header_length, std::size_t payload_length);

/// Checks a part's payload against a header that passed check_frame_header; "" or the reason.
std::string check_frame_payload(const ucx_frame_header& h, std::string_view payload);

}  // namespace dls::runtime
