// `dilaserve start`: run one head or one node in the foreground, as on a real
// multi-host cluster (and as `up` does for every process it launches).
#include "actors/processes.hpp"
#include "dilaserve/command_registry.hpp"
#include "runtime/head_watchdog.hpp"
#include "runtime/process.hpp"
#include "runtime/state_dir.hpp"

#include <iostream>
#include <memory>
#include <sstream>

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
  std::string state_dir;  // head: where the write-ahead log lives
  bool recover = false;
  bool supervise = false;
  int ready_fd = -1;
};

// The head's own command line, for the watchdog to run (and run again with --recover).
std::vector<std::string> head_command(const start_options& o) {
  std::vector<std::string> argv{dls::runtime::self_executable(), "start", "--head", "--config", o.config};
  if (!o.state_dir.empty()) argv.insert(argv.end(), {"--state-dir", dls::runtime::resolve_state_dir(o.state_dir)});
  if (!o.tls_dir.empty()) argv.insert(argv.end(), {"--tls-dir", o.tls_dir});
  if (o.insecure) argv.push_back("--insecure");
  if (!o.profile.empty()) argv.insert(argv.end(), {"--profile", o.profile});
  if (o.slo_scale > 0) {
    std::ostringstream s;
    s.precision(17);  // the value itself, not six digits of it
    s << o.slo_scale;
    argv.insert(argv.end(), {"--slo-scale", s.str()});
  }
  if (o.recover) argv.push_back("--recover");
  return argv;
}

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
    auto security = security_for(o, &cfg, "head");
    if (o.recover && o.state_dir.empty())
      throw std::runtime_error("--recover needs --state-dir DIR, the directory whose head.wal it carries on from");
    if (o.supervise) {
      if (o.state_dir.empty())
        throw std::runtime_error("--supervise needs --state-dir DIR: a restarted head recovers from DIR/head.wal");
      // Before any thread exists: the watchdog only forks and waits.
      return rt::run_head_watchdog({head_command(o), o.ready_fd, o.state_dir});
    }
    dls::actors::head_options h;
    h.ready_fd = o.ready_fd;
    h.security = security;
    h.state_dir = o.state_dir.empty() ? std::string() : rt::resolve_state_dir(o.state_dir);
    h.recover = o.recover;
    return dls::actors::run_head(cfg, h);
  }
  if (o.recover || o.supervise) throw std::runtime_error("--recover and --supervise are options of start --head");
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
  sub->add_option("--state-dir", o->state_dir,
                  "Head: persist accepted requests, membership and layout in DIR/head.wal (`up` passes its state dir)");
  sub->add_flag("--recover", o->recover,
                "Head: carry on from DIR/head.wal after a crash: same port, requests resume from their last canvas");
  sub->add_flag("--supervise", o->supervise,
                "Head: run it under a watchdog that restarts it with --recover when it dies (what `up` does)");
  sub->add_option("--ready-fd", o->ready_fd, "File descriptor to report readiness on (used by `up`)")->group("");
  return std::function<int()>([o] { return run_start(*o); });
}};

}  // namespace
