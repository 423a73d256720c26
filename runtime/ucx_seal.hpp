#pragma once
// Sealing of data-plane parts: every part that crosses between processes is encrypted and
// authenticated with AES-256-GCM, so that nobody on the path between two node hosts can read a
// KV cache or a canvas, or replace one with bytes that import. The cluster's data-plane key
// (32 random bytes, made by the head and handed to each node in its join reply over the TLS
// control plane) never travels over UCX. Each part gets a key of its own, derived from the
// cluster key, a random salt in its header and the receiver's worker address, so that a nonce
// is never used twice under one key, and a part sealed for one node does not open at another.
// The header (transfer id, offset, part, sizes) is authenticated with the payload.
#include "runtime/ucx_frame.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace dls::runtime {

constexpr std::size_t ucx_seal_key_bytes = 32;

/// A fresh data-plane key from OpenSSL's CSPRNG; throws std::runtime_error if it has none.
std::string make_seal_key();

/// Seals `h.bytes` bytes at `in` into `out` (as many bytes; may be `in`) for the worker at
/// `receiver`: sets h.sealed, a fresh salt and the tag. `h` otherwise as make_part_geometry
/// made it. Throws std::runtime_error if OpenSSL fails.
void seal_part(std::string_view key, std::string_view receiver, ucx_frame_header& h, const char* in, char* out);

/// Opens a sealed part in place at this worker (`receiver`: its own address): "" when it
/// authenticates (the bytes are then the plaintext), else a one-line reason (the bytes are then
/// garbage).
std::string open_part(std::string_view key, std::string_view receiver, const ucx_frame_header& h, char* data);

/// "" when a frame is sealed exactly when this receiver wants it sealed, else why it is refused.
std::string check_frame_sealing(const ucx_frame_header& h, bool sealed_wanted);

}  // namespace dls::runtime
