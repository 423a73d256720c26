#pragma once
// The header every UCX data-plane transfer carries as its active-message header: which
// transfer it is, how many bytes follow and their checksum, so a receiver refuses a
// truncated or corrupt buffer before anything imports it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dls::runtime {

struct ucx_frame_header {
  static constexpr uint32_t magic_value = 0x58534c44;  // "DLSX" in memory order
  static constexpr uint32_t current_version = 1;
  uint32_t magic = magic_value;
  uint32_t version = current_version;
  uint64_t transfer_id = 0;
  uint64_t bytes = 0;     // payload length
  uint64_t checksum = 0;  // XXH3-64 of the payload
};

/// The header of `payload` under `transfer_id`.
ucx_frame_header make_frame_header(uint64_t transfer_id, std::string_view payload);

/// Checks an arriving header (its length as UCX delivered it) and the payload length UCX
/// announced; returns "" or a one-line reason ("...: truncated, 100 of 4096 bytes").
std::string check_frame_header(const void* header, std::size_t header_length, std::size_t payload_length);

/// Checks the payload against a header that passed check_frame_header; "" or the reason.
std::string check_frame_payload(const ucx_frame_header& h, std::string_view payload);

}  // namespace dls::runtime
