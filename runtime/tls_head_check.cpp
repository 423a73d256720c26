#include "runtime/tls_head_check.hpp"

#include <openssl/x509.h>

#include <cstring>

namespace dls::runtime {

namespace {

constexpr char head_prefix[] = "dilaserve-head.";

int only_the_head(int preverify_ok, X509_STORE_CTX* store) {
  if (X509_STORE_CTX_get_error_depth(store) != 0) return preverify_ok;  // the CA: OpenSSL's checks
  if (!is_head_certificate(X509_STORE_CTX_get_current_cert(store))) {
    X509_STORE_CTX_set_error(store, X509_V_ERR_APPLICATION_VERIFICATION);
    return 0;
  }
  return preverify_ok;
}

}  // namespace

bool is_head_certificate(X509* cert) {
  if (!cert) return false;
  char cn[256] = {};
  const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  return n > 0 && static_cast<std::size_t>(n) < sizeof cn && std::strncmp(cn, head_prefix, sizeof head_prefix - 1) == 0;
}

void require_head_certificate(SSL* ssl) { SSL_set_verify(ssl, SSL_get_verify_mode(ssl), only_the_head); }

}  // namespace dls::runtime
