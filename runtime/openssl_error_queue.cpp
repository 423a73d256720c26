// CAF 0.17.6's openssl module calls SSL_read/SSL_write/SSL_accept/SSL_connect without
// clearing the thread's OpenSSL error queue first, though SSL_get_error() requires it to be
// empty. The middleman's one multiplexer thread serves every connection, so an error left by
// one peer closing its session made the next SSL_read of another session read as fatal: each
// CLI call that disconnected cut the head's connections to its nodes. These definitions in
// the executable interpose on libssl's (libcaf_openssl resolves them dynamically) and clear
// the queue before each call, as OpenSSL documents, then run the real function. SSL_connect
// also requires the server to present the cluster head's certificate (runtime/tls_head_check.hpp).
#include "runtime/next_symbol.hpp"
#include "runtime/tls_head_check.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace {

template <class F>
F real(const char* name) {
  return dls::runtime::detail::next_symbol<F>(name, "libssl");
}

}  // namespace

extern "C" {

int SSL_read(SSL* s, void* buf, int n) {
  static auto f = real<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return f(s, buf, n);
}

int SSL_write(SSL* s, const void* buf, int n) {
  static auto f = real<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return f(s, buf, n);
}

int SSL_accept(SSL* s) {
  static auto f = real<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  return f(s);
}

int SSL_connect(SSL* s) {
  static auto f = real<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  dls::runtime::require_head_certificate(s);
  return f(s);
}

}  // extern "C"

namespace dls::runtime::detail {

// Referenced from configure_networked_caf so that the linker always takes this object out of
// the static runtime library into every program that talks TLS.
void openssl_error_queue_guard() {}

}  // namespace dls::runtime::detail
