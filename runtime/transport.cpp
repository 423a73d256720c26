#include "runtime/transport.hpp"

#include "runtime/caf_setup.hpp"
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
  return result;
}

}  // namespace dls::runtime
