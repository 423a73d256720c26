// `dilaserve certs`: make (or renew) the cluster's CA and per-role certificates, for copying
// to the hosts of a multi-host cluster. `up` makes them itself on first use.
#include "dilaserve/command_registry.hpp"
#include "runtime/pki.hpp"
#include "runtime/state_dir.hpp"

#include <filesystem>
#include <iostream>
#include <memory>

namespace fs = std::filesystem;
namespace rt = dls::runtime;

namespace {

struct certs_options {
  std::string dir;
  std::string state_dir;
  std::string cluster = "dilaserve";
  bool renew = false;
  bool replace_ca = false;
};

int run_certs(const certs_options& o) {
  auto dir = !o.dir.empty() ? fs::absolute(o.dir).string()
                            : (fs::path(rt::resolve_state_dir(o.state_dir)) / "tls").string();
  if (rt::pki_complete(dir) && !o.renew && !o.replace_ca) {
    std::cout << "the cluster's certificates already exist in " << dir
              << " (--renew issues new role certificates from the same CA, --replace-ca a new CA)\n";
    return 0;
  }
  rt::make_cluster_pki(dir, o.cluster, o.replace_ca);
  for (const char* role : rt::pki_roles) rt::check_tls_identity(rt::tls_files(dir, role));
  std::cout << "made the cluster's CA and certificates in " << dir << "\n"
            << "  ca.pem            the CA every process trusts (ca.key signs; keep it on the head host only)\n"
            << "  head.pem/.key     the head\n"
            << "  node.pem/.key     node hosts (copy ca.pem and these)\n"
            << "  admin.pem/.key    operators (up, down, reconfigure)\n"
            << "  client.pem/.key   submit-only clients (with a submit token)\n";
  return 0;
}

dls::cli::register_command reg{"certs", [](CLI::App& app) {
  auto* sub = app.add_subcommand("certs", "Make the cluster's CA and per-role TLS certificates");
  auto o = std::make_shared<certs_options>();
  sub->add_option("--dir", o->dir, "Where to write them (default STATE_DIR/tls, where `up` looks)");
  sub->add_option("--state-dir", o->state_dir, "State directory (default $DILASERVE_STATE_DIR or ~/.dilaserve)");
  sub->add_option("--cluster", o->cluster, "Cluster name written into the certificates");
  sub->add_flag("--renew", o->renew, "Issue new role certificates from the existing CA");
  sub->add_flag("--replace-ca", o->replace_ca, "Make a new CA too (every host needs the new files)");
  return std::function<int()>([o] { return run_certs(*o); });
}};

}  // namespace
