#pragma once
// How every process of a cluster reaches the others: mutual TLS through CAF's openssl module
// with the cluster's own CA (runtime/pki.hpp), or plain TCP only where the cluster file says
// `auth.insecure: true`. Every publish and every connect of the project goes through here, so
// no code path can open a plain port by accident.
#include "runtime/messages.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/expected.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace dls::runtime {

struct transport_security {
  bool tls = true;
  std::string dir;           // the cluster's TLS directory (ca.pem, ROLE.pem, ROLE.key)
  std::string role = "admin";  // whose certificate this process presents (runtime/pki.hpp)
  static transport_security insecure() { return {false, "", ""}; }
};

/// configure_caf, plus the openssl module and this role's certificate when `sec.tls`. Throws
/// std::runtime_error naming the missing or bad TLS file.
void configure_networked_caf(caf::actor_system_config& cfg, const std::vector<std::string>& args,
                             const transport_security& sec);

/// Publishes the gate, over TLS when `sec.tls`.
caf::expected<uint16_t> publish_gate(caf::actor_system& sys, const gate_actor& gate, uint16_t port,
                                     const std::string& host, const transport_security& sec);

/// Connects to a head's gate, over TLS when `sec.tls`, giving up after `timeout` (connect and
/// handshake together).
caf::expected<gate_actor> connect_gate(caf::actor_system& sys, const std::string& host, uint16_t port,
                                       const transport_security& sec,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace dls::runtime
