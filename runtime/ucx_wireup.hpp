#pragma once
// The first exchange between the UCX workers of two node processes, made as soon as both have
// joined rather than by the first migration between them. UCX 1.13 (Debian 12's) aborts a
// receiving process on an internal assertion when the sender dies while the receiver's wireup
// reply is still connecting (docs/runtime.md, "Data plane"); once a ping and its pong have
// crossed, both endpoints are up, and a later sender's death is an ordinary failed transfer.
//
// The newer node sends each peer a ping (its own address as payload); the peer's progress thread
// answers with a pong to that address under the same id. Both are unasked transfers (no one
// waits for them by id), told apart from peer-kept snapshots by `wireup_bit`.
#include "runtime/ucx_transport.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace dls::runtime {

constexpr uint64_t wireup_bit = uint64_t{1} << 62;
constexpr uint64_t wireup_pong_bit = uint64_t{1} << 61;
/// A worker address is a few hundred bytes; a ping claiming more is not one.
constexpr std::size_t wireup_address_max = 4096;

/// Whether an unasked transfer belongs to the wireup exchange.
inline bool is_wireup(uint64_t id) { return (id & ucx_transport::unasked_bit) && (id & wireup_bit); }

/// The id of a ping made from `nonce` (its low 61 bits).
inline uint64_t wireup_ping_id(uint64_t nonce) {
  return (nonce & (wireup_pong_bit - 1)) | ucx_transport::unasked_bit | wireup_bit;
}

/// Sends a ping to `peer_address` carrying `t`'s own address; `done` runs on the progress
/// thread if the ping itself fails (else the pong reports).
void send_wireup_ping(ucx_transport& t, const std::string& peer_address, uint64_t id, ucx_transport::send_done done);

/// For an arrived wireup transfer (`is_wireup(id)`), on the progress thread: a ping is
/// answered with a pong and yields nothing; a pong yields its ping's id and "" or the reason
/// it failed. A ping that failed, or whose payload is not an address, is logged and dropped.
std::optional<std::pair<uint64_t, std::string>> answer_wireup(ucx_transport& t, uint64_t id, const std::string& error,
                                                             const ucx_payload& payload);

}  // namespace dls::runtime
