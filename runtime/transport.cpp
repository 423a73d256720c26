#include "runtime/transport.hpp"

#include "runtime/caf_setup.hpp"
#include "runtime/fresh_accept.hpp"
#include "runtime/pki.hpp"
#include "runtime/tls_probe.hpp"

#include <caf/io/middleman.hpp>
#include <caf/openssl/all.hpp>
#include <caf/scoped_actor.hpp>

#include <stdexcept>

namespace dls::runtime {

namespace detail {
void openssl_error_queue_guard();
}

void configure_networked_caf(caf::actor_system_config& cfg, const std::vector<std::string>& args,
                             const transport_security& sec) {
  std::vector<std::string> all;
  detail::fresh_accept_guard();
  if (sec.tls) {
    detail::openssl_error_queue_guard();
    if (sec.dir.empty())
      throw std::runtime_error("TLS is on but no TLS directory was given (--tls-dir, or `auth.insecure: true` "
                               "in the cluster file for plain TCP)");
    auto id = tls_files(sec.dir, sec.role);
    check_tls_identity(id);
    // Any of these settings switches CAF's openssl module from anonymous to certificate
    // authentication with SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT on both ends.
    all = {"--openssl.certificate=" + id.cert, "--openssl.key=" + id.key, "--openssl.cafile=" + id.ca};
  }
  all.insert(all.end(), args.begin(), args.end());
  configure_caf(cfg, all, sec.tls);
}

caf::expected<uint16_t> publish_gate(caf::actor_system& sys, const gate_actor& gate, uint16_t port,
                                     const std::string& host, const transport_security& sec) {
  if (sec.tls) {
    if (!sys.has_openssl_manager()) return caf::make_error(caf::sec::runtime_error, "TLS requested without the openssl module");
    return caf::openssl::publish(gate, port, host.c_str(), true);
  }
  return sys.middleman().publish(gate, port, host.c_str(), true);
}

namespace {

// One connection attempt through the middleman actor; `result` gets the gate or the error.
void connect_once(caf::scoped_actor& self, const caf::io::middleman_actor& mm, const std::string& host, uint16_t port,
                  std::chrono::milliseconds timeout, caf::actor_system& sys, caf::expected<gate_actor>& result) {
  self->request(mm, timeout, caf::connect_atom::value, host, port)
      .receive(
          [&](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>& ifs) {
            if (!ptr) {
              result = caf::make_error(caf::sec::no_actor_published_at_port, "no actor published at port " +
                                                                                std::to_string(port));
              return;
            }
            auto expected_ifs = sys.message_types(caf::detail::type_list<gate_actor>{});
            if (ifs != expected_ifs) {
              result = caf::make_error(caf::sec::unexpected_actor_messaging_interface,
                                       "the peer at " + host + ":" + std::to_string(port) +
                                           " is not a DiLaServe head of this version");
              return;
            }
            result = caf::actor_cast<gate_actor>(std::move(ptr));
          },
          [&](caf::error& e) {
            if (e == caf::sec::request_timeout)
              result = caf::make_error(caf::sec::request_timeout,
                                       "no handshake within " + std::to_string(timeout.count()) +
                                           " ms (is the head stopped or hung?)");
            else
              result = std::move(e);
          });
}

}  // namespace

caf::expected<gate_actor> connect_gate(caf::actor_system& sys, const std::string& host, uint16_t port,
                                       const transport_security& sec, std::chrono::milliseconds timeout) {
  if (sec.tls && !sys.has_openssl_manager())
    return caf::make_error(caf::sec::runtime_error, "TLS requested without the openssl module");
  // remote_actor() waits for the handshake without a limit: a stopped head that the kernel
  // still accepts connections for would hang every client. The middleman actor's connect
  // with a request timeout is the same operation, bounded.
  if (sec.tls) {
    auto why = probe_tls_handshake(host, port, tls_files(sec.dir, sec.role), timeout);
    if (!why.empty()) return caf::make_error(caf::sec::cannot_connect_to_node, why);
  }
  const auto& mm = sec.tls ? sys.openssl_manager().actor_handle() : sys.middleman().actor_handle();
  caf::scoped_actor self{sys};
  caf::expected<gate_actor> result{caf::sec::request_timeout};
  // CAF 0.17's BASP broker creates a connecting client's context with its last-seen time at
  // zero and only sets it when the server's handshake arrives; a heartbeat tick in between
  // (every 200 ms here, while TLS and the handshake take milliseconds) drops the connection
  // as timed out (sec::connection_timeout) before it ever carried a message. That race is
  // the only way a fresh connection times out that fast, so it is tried again, within the
  // same overall timeout.
  constexpr int connect_attempts = 3;
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (int attempt = 1;; ++attempt) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    connect_once(self, mm, host, port, left, sys, result);
    if (result || result.error() != caf::sec::connection_timeout || attempt == connect_attempts) break;
  }
  return result;
}

}  // namespace dls::runtime
