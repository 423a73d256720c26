// `dilaserve start`: run one head or one node in the foreground, as on a real
// multi-host cluster (and as `up` does for every process it launches).
#include "actors/processes.hpp"
#include "dilaserve/command_registry.hpp"
#include "runtime/state_dir.hpp"

#include <iostream>
#include <memory>

namespace {

struct start_options {
  bool head = false;
  std::string config;
  std::string address;
  std::string token_file;
  std::string node;
  std::string profile;
  double slo_scale = 0;
  std::string tls_dir;
  bool insecure = false;
  int ready_fd = -1;
};

// TLS unless the cluster file (or, for a node without one, the flag) says plain TCP; the
// certificates come from --tls-dir, else auth.tls_dir of the file.
dls::runtime::transport_security security_for(const start_options& o, const dls::runtime::cluster_config* cfg,
                                              const char* role) {
  bool insecure = o.insecure || (cfg && cfg->insecure);
  if (insecure) {
    if (!o.tls_dir.empty()) throw std::runtime_error("--tls-dir and an insecure (plain TCP) cluster exclude each other");
    if (cfg && !cfg->insecure && o.insecure)
      throw std::runtime_error("--insecure given, but " + cfg->file + " does not say auth.insecure: true");
    return dls::runtime::transport_security::insecure();
  }
  auto dir = !o.tls_dir.empty() ? o.tls_dir : cfg ? cfg->tls_dir : std::string();
  if (dir.empty())
    throw std::runtime_error(std::string("start needs --tls-dir DIR with the cluster's certificates (made by "
                                         "`dilaserve certs`), or auth.tls_dir in the cluster file"));
  return {true, dir, role};
}

int run_start(const start_options& o) {
  namespace rt = dls::runtime;
  if (o.head) {
    if (o.config.empty()) throw std::runtime_error("start --head needs --config FILE");
    auto cfg = rt::load_cluster_config(o.config);
    if (!o.profile.empty()) rt::set_profile(cfg.scheduler, o.profile);
    if (o.slo_scale > 0) cfg.scheduler.slo_scale = o.slo_scale;
    return dls::actors::run_head(cfg, {o.ready_fd, security_for(o, &cfg, "head")});
  }
  if (o.address.empty() || o.node.empty())
    throw std::runtime_error("start needs either --head --config FILE, or --address HOST:PORT --node NAME");
  dls::actors::node_options n;
  auto [host, port] = rt::split_address(o.address);
  n.host = host;
  n.port = port;
  n.node = o.node;
  n.ready_fd = o.ready_fd;
  if (!o.token_file.empty()) {
    n.token = rt::read_token(o.token_file);
  } else if (!o.config.empty()) {
    n.token = rt::load_cluster_config(o.config).token;
  } else {
    throw std::runtime_error("start --address needs --token-file FILE (or --config FILE holding the token)");
  }
  if (!o.config.empty()) {
    auto cfg = rt::load_cluster_config(o.config);
    n.caf_args = cfg.process_caf_args();
    n.security = security_for(o, &cfg, "node");
  } else {
    n.security = security_for(o, nullptr, "node");
  }
  return dls::actors::run_node(n);
}

dls::cli::register_command reg{"start", [](CLI::App& app) {
  auto* sub = app.add_subcommand("start", "Run one head (--head) or one node (--address) in the foreground");
  auto o = std::make_shared<start_options>();
  sub->add_flag("--head", o->head, "Run the head of the cluster described by --config");
  sub->add_option("--config", o->config, "Cluster YAML file (head: required; node: CAF settings, token)");
  sub->add_option("--address", o->address, "HOST:PORT of the head to join as a node");
  sub->add_option("--token-file", o->token_file, "File holding the cluster token");
  sub->add_option("--node", o->node, "Name of this node in the cluster file");
  sub->add_option("--profile", o->profile,
                  "Head: the step-cost profile the policies use when the cluster file names none (`up` measures one)");
  sub->add_option("--slo-scale", o->slo_scale, "Head: scheduler.slo_scale instead of the cluster file's")
      ->check(CLI::Range(0.01, 1e6));
  sub->add_option("--tls-dir", o->tls_dir, "Directory with the cluster's CA and certificates (dilaserve certs)");
  sub->add_flag("--insecure", o->insecure, "Plain TCP, for a cluster whose file says auth.insecure: true");
  sub->add_option("--ready-fd", o->ready_fd, "File descriptor to report readiness on (used by `up`)")->group("");
  return std::function<int()>([o] { return run_start(*o); });
}};

}  // namespace
