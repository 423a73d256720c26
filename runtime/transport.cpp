#include "runtime/transport.hpp"

#include "runtime/caf_setup.hpp"
#include "runtime/pki.hpp"

#include <caf/io/middleman.hpp>
#include <caf/openssl/all.hpp>

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
                                       const transport_security& sec) {
  if (sec.tls) {
    if (!sys.has_openssl_manager()) return caf::make_error(caf::sec::runtime_error, "TLS requested without the openssl module");
    return caf::openssl::remote_actor<gate_actor>(sys, host, port);
  }
  return sys.middleman().remote_actor<gate_actor>(host, port);
}

}  // namespace dls::runtime
