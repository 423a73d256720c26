#pragma once
// A bounded TLS handshake with a head before CAF connects to it. CAF 0.17.6's openssl module
// runs the client handshake as blocking reads on its multiplexer thread with no timeout, so a
// stopped or hung head (whose kernel still accepts the TCP connection) would hang the client
// for good, and even the actor system's shutdown behind it. The probe does the same mutual-TLS
// handshake on its own non-blocking socket under a deadline.
#include "runtime/pki.hpp"

#include <chrono>
#include <string>

namespace dls::runtime {

/// "" when a mutual-TLS handshake with host:port completed within `timeout` using `id`;
/// otherwise what went wrong, in one line.
std::string probe_tls_handshake(const std::string& host, int port, const tls_identity& id,
                                std::chrono::milliseconds timeout);

}  // namespace dls::runtime
