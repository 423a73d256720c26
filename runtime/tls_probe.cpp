#include "runtime/tls_probe.hpp"

#include "runtime/tls_head_check.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace dls::runtime {

namespace {

using clock_type = std::chrono::steady_clock;

struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};
struct ctx_free { void operator()(SSL_CTX* c) const { SSL_CTX_free(c); } };
struct ssl_free { void operator()(SSL* s) const { SSL_free(s); } };

int ms_left(clock_type::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

bool wait_for(int fd, short events, clock_type::time_point deadline) {
  pollfd p{fd, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, ms_left(deadline));
  } while (r < 0 && errno == EINTR);
  return r > 0;
}

std::string ssl_error() {
  char buf[256];
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "connection closed by the peer";
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

}  // namespace

std::string probe_tls_handshake(const std::string& host, int port, const tls_identity& id,
                                std::chrono::milliseconds timeout) {
  auto deadline = clock_type::now() + timeout;
  auto where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    return "cannot resolve " + host + " (" + ::gai_strerror(rc) + ")";
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addrs(res, ::freeaddrinfo);
  fd_guard sock;
  sock.fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (sock.fd < 0) return std::string("socket: ") + std::strerror(errno);
  if (::connect(sock.fd, res->ai_addr, res->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return "cannot connect to " + where + ": " + std::strerror(errno);
    if (!wait_for(sock.fd, POLLOUT, deadline)) return "no TCP connection to " + where + " within the timeout";
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(sock.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return "cannot connect to " + where + ": " + std::strerror(err);
  }
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, ctx_free> ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx || SSL_CTX_use_certificate_chain_file(ctx.get(), id.cert.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx.get(), id.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_load_verify_locations(ctx.get(), id.ca.c_str(), nullptr) != 1)
    return "cannot load the TLS identity " + id.cert + ": " + ssl_error();
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  std::unique_ptr<SSL, ssl_free> ssl(SSL_new(ctx.get()));
  if (!ssl || SSL_set_fd(ssl.get(), sock.fd) != 1) return "cannot start TLS: " + ssl_error();
  require_head_certificate(ssl.get());  // as every connection of the program (openssl_error_queue.cpp)
  for (;;) {
    ERR_clear_error();
    int r = SSL_connect(ssl.get());
    if (r == 1) break;
    int e = SSL_get_error(ssl.get(), r);
    short want = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
    if (want == 0) {
      if (SSL_get_verify_result(ssl.get()) == X509_V_ERR_APPLICATION_VERIFICATION)
        return "TLS handshake with " + where + " refused: the server presented a certificate of this cluster's CA " +
               "that is not the head's (a node's, an admin's or a client's standing in for the head)";
      return "TLS handshake with " + where + " failed: " + ssl_error();
    }
    if (!wait_for(sock.fd, want, deadline))
      return "no TLS handshake from " + where + " within " + std::to_string(timeout.count()) +
             " ms (is the head stopped or hung?)";
  }
  // A clean close, so the head logs nothing alarming for the probe.
  ERR_clear_error();
  SSL_shutdown(ssl.get());
  return {};
}

}  // namespace dls::runtime
