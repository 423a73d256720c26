#pragma once
// Every TLS connection a DiLaServe program opens goes to a cluster's head (nodes, the CLI,
// embedding programs; nothing else listens). Every role's certificate is signed by the one
// cluster CA, so chaining to the CA alone would let the holder of a submit-only client
// certificate (or a node's) stand in for the head, wherever it can take the head's address,
// and collect the node and admin tokens its peers send. So a connecting program also requires
// the server's certificate to be the head's (CN `dilaserve-head.CLUSTER`, runtime/pki.hpp).
#include <openssl/ssl.h>

namespace dls::runtime {

/// Installs the head check on a client connection before its handshake; keeps the verify mode.
void require_head_certificate(SSL* ssl);

/// True when `cert` is a head certificate as runtime/pki.cpp issues them.
bool is_head_certificate(X509* cert);

}  // namespace dls::runtime
