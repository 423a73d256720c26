#pragma once
// The cluster's own certificate authority: one CA and one certificate per role, so every
// connection of a cluster (nodes, CLI, embedding programs) runs mutual TLS and a peer without
// a certificate signed by this CA cannot even finish the handshake.
#include <string>

namespace dls::runtime {

/// The roles that get a certificate. The certificate proves membership of the cluster; what a
/// peer may do once connected is decided by the credential (token) it presents to the gate.
inline constexpr const char* pki_roles[] = {"head", "node", "admin", "client"};

/// The PEM files of one role inside a TLS directory.
struct tls_identity {
  std::string ca;    // DIR/ca.pem
  std::string cert;  // DIR/ROLE.pem
  std::string key;   // DIR/ROLE.key (mode 0600)
};

tls_identity tls_files(const std::string& dir, const std::string& role);

/// True when DIR holds the CA and every role's certificate and key.
bool pki_complete(const std::string& dir);

/// Creates DIR (mode 0700) with a fresh CA (ca.pem, ca.key) and a certificate and key per role,
/// signed by it; keys are written readable by the owner only. Refuses to overwrite an existing
/// CA unless `replace` is set. Throws std::runtime_error with a one-line message.
void make_cluster_pki(const std::string& dir, const std::string& cluster, bool replace = false);

/// Checks that the role's files exist, are readable, that the key matches the certificate,
/// that the certificate chains to ca.pem and is not expired, and that the key is not readable
/// by others. Throws std::runtime_error naming the file and the problem.
void check_tls_identity(const tls_identity& id);

/// Writes `text` to `path` created with `mode` (no window in which it is more readable).
void write_private_file(const std::string& path, const std::string& text, unsigned mode = 0600);

}  // namespace dls::runtime
