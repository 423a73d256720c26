// `dilaserve up FILE`: start the head and every node in the background, wait until all
// have joined, and record what was started in the state directory.
#include "dilaserve/command_registry.hpp"
#include "dilaserve/shell_quote.hpp"
#include "dilaserve/up_profile.hpp"
#include "runtime/client.hpp"
#include "runtime/cluster_config.hpp"
#include "runtime/pki.hpp"
#include "runtime/process.hpp"
#include "runtime/state_dir.hpp"

#include <caf/scoped_actor.hpp>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <memory>

namespace fs = std::filesystem;
namespace rt = dls::runtime;

namespace {

struct up_options {
  std::string config;
  std::string state_dir;
  int timeout_s = 60;
  double slo_scale = 0;  // > 0: instead of the file's scheduler.slo_scale
  std::string profile_cache;  // a directory that keeps measured profiles for every state dir
};

// A CPU device slot is meant to be a core. With more slots on this host than cores, TP groups
// share cores, so under load their steps run slower than the profile (which times each group
// alone, with the machine to itself) predicts, and the policies plan with that profile.
void warn_if_cores_are_shared(const rt::cluster_config& cfg, const std::string& file) {
  int slots = 0;
  std::string names;
  for (const auto& n : cfg.nodes)
    if (rt::is_local_host(n.host) && n.devices.kind == "cpu") {
      slots += n.devices.slots();
      names += (names.empty() ? "" : ", ") + n.name;
    }
  // Counted as ensure_profile counts them for the TP degrees it measures.
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (cores <= 0 || slots <= cores) return;
  std::cerr << "dilaserve: warning: " << file << " puts " << slots << " CPU device slots on this host's " << cores
            << " cores (nodes " << names
            << "): TP groups share cores, and under load their steps take longer than the profile measured\n";
}

void stop_all(const rt::cluster_state& st) {
  for (const auto& p : st.processes)
    if (rt::process_alive(p.pid)) ::kill(p.pid, SIGTERM);
  for (const auto& p : st.processes)
    if (!rt::wait_exit(p.pid, 5000)) ::kill(p.pid, SIGKILL);
}

int run_up(const up_options& o) {
  auto cfg = rt::load_cluster_config(o.config);
  auto dir = rt::resolve_state_dir(o.state_dir);
  if (fs::exists(rt::state_file(dir))) {
    auto old = rt::load_state(dir);
    for (const auto& p : old.processes)
      if (rt::signal_if_same(p.pid, p.identity, 0).result == rt::signal_result::sent)
        throw std::runtime_error("cluster '" + old.cluster + "' is still running from " + dir + " (" + p.role + " " +
                                 p.name + ", pid " + std::to_string(p.pid) + "); run `dilaserve down` first");
  }
  fs::create_directories(fs::path(dir) / "logs");
  auto config_abs = fs::absolute(o.config).string();
  rt::cluster_state st;
  st.cluster = cfg.name;
  st.config_file = config_abs;
  st.head_host = cfg.head_host;
  st.token_file = (fs::path(dir) / "token").string();
  rt::write_token(st.token_file, cfg.token);
  // Nodes join with the node credential where the file gives one, so a node host never holds
  // the admin token.
  auto node_token_file = st.token_file;
  if (!cfg.node_token.empty()) {
    node_token_file = (fs::path(dir) / "node.token").string();
    rt::write_token(node_token_file, cfg.node_token);
  }
  warn_if_cores_are_shared(cfg, o.config);
  std::vector<std::string> transport;
  if (cfg.insecure) {
    st.insecure = true;
    std::cerr << "dilaserve: warning: auth.insecure is true in " << o.config
              << ": the cluster runs over plain TCP and anyone who reaches " << cfg.head_host
              << " can message its actors; remove it to get mutual TLS\n";
    transport = {"--insecure"};
  } else {
    st.tls_dir = cfg.tls_dir.empty() ? (fs::path(dir) / "tls").string() : cfg.tls_dir;
    if (!rt::pki_complete(st.tls_dir)) {
      rt::make_cluster_pki(st.tls_dir, cfg.name);
      std::cout << "made the cluster's CA and certificates in " << st.tls_dir << "\n";
    }
    transport = {"--tls-dir", st.tls_dir};
  }
  auto self = rt::self_executable();
  try {
    auto head_log = (fs::path(dir) / "logs" / "head.log").string();
    // The head runs under a watchdog (`start --head --supervise`) that restarts it with
    // --recover from the write-ahead log in the state directory when it dies.
    std::vector<std::string> head_argv{self, "start", "--head", "--config", config_abs};
    if (cfg.head_wal) head_argv.insert(head_argv.end(), {"--state-dir", dir, "--supervise"});
    head_argv.insert(head_argv.end(), transport.begin(), transport.end());
    if (o.slo_scale > 0) {
      std::ostringstream s;
      s.precision(17);
      s << o.slo_scale;
      head_argv.insert(head_argv.end(), {"--slo-scale", s.str()});
    }
    if (auto profile = dls::cli::ensure_profile(cfg, dir, o.profile_cache); !profile.empty()) {
      head_argv.push_back("--profile");
      head_argv.push_back(profile);
    }
    auto launched = rt::spawn_background(head_argv, head_log);  // the watchdog, or the head itself
    if (cfg.head_wal)
      st.processes.push_back({"head-watchdog", "head-watchdog", launched.pid, head_log, launched.identity});
    else
      st.processes.push_back({"head", "head", launched.pid, head_log, launched.identity});
    rt::save_state(dir, st);
    std::string ready;
    try {
      ready = rt::wait_ready(launched, o.timeout_s * 1000);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("the head ") + e.what() + "; see " + head_log);
    }
    st.head_port = std::stoi(ready.substr(ready.find(' ') + 1));
    if (auto pos = ready.find(" head-pid "); pos != std::string::npos) {
      // The head itself comes first: `down` waits for it, then for its watchdog.
      int head_pid = std::stoi(ready.substr(pos + 10));
      rt::process_record head{"head", "head", head_pid, head_log, {}};
      if (auto id = rt::read_identity(head_pid)) head.identity = *id;
      st.processes.insert(st.processes.begin(), head);
    }
    if (auto pos = ready.find(" http "); pos != std::string::npos) {
      st.http_host = cfg.http.host;
      st.http_port = std::stoi(ready.substr(pos + 6));
    }
    rt::save_state(dir, st);
    auto address = cfg.head_host + ":" + std::to_string(st.head_port);
    std::vector<std::pair<rt::spawned_process, std::string>> started;
    for (const auto& n : cfg.nodes) {
      auto log = (fs::path(dir) / "logs" / (n.name + ".log")).string();
      std::vector<std::string> argv{self, "start", "--address", address, "--token-file", node_token_file,
                                    "--node", n.name, "--config", config_abs};
      argv.insert(argv.end(), transport.begin(), transport.end());
      if (!rt::is_local_host(n.host)) {
        // Another host: hand the command to the launch template (ssh-style); readiness
        // then comes from the head rather than from a pipe.
        std::string cmd;
        for (auto& a : argv) cmd += (cmd.empty() ? "" : " ") + dls::cli::shell_quote(a);
        auto line = cfg.launch_command;
        line.replace(line.find("{command}"), 9, cmd);
        if (auto pos = line.find("{host}"); pos != std::string::npos) line.replace(pos, 6, n.host);
        argv = {"/bin/sh", "-c", line + " #"};  // '#' swallows the appended --ready-fd
      }
      auto p = rt::spawn_background(argv, log);
      st.processes.push_back({"node", n.name, p.pid, log, p.identity});
      rt::save_state(dir, st);
      if (rt::is_local_host(n.host)) started.emplace_back(p, log);
    }
    for (auto& [p, log] : started) {
      try {
        rt::wait_ready(p, o.timeout_s * 1000);
      } catch (const std::exception& e) {
        // The node's own last word names the problem (bad device, model, profile...).
        std::ifstream in(log);
        std::string last, l;
        while (std::getline(in, l))
          if (!l.empty()) last = l;
        throw std::runtime_error(std::string("a node ") + e.what() + (last.empty() ? "" : ": " + last) + "; see " + log);
      }
    }
    // Every node has registered with the head once `await` answers.
    rt::cluster_session session(rt::address_of(st));
    caf::scoped_actor scoped{session.system()};
    std::string failure;
    scoped->request(session.head(), std::chrono::seconds(o.timeout_s), rt::await_atom::value)
        .receive([](const std::string&) {}, [&](const caf::error& e) { failure = session.system().render(e); });
    if (!failure.empty()) throw std::runtime_error("not every node joined: " + failure);
    // A launch template's shell may have exec'd its command since: record what now runs.
    for (auto& p : st.processes)
      if (auto now = rt::read_identity(p.pid); now && now->start_ticks == p.identity.start_ticks) p.identity = *now;
    rt::save_state(dir, st);
  } catch (...) {
    stop_all(st);
    fs::remove(rt::state_file(dir));
    throw;
  }
  std::cout << "cluster '" << cfg.name << "' is up: head at " << cfg.head_host << ":" << st.head_port << ", "
            << cfg.nodes.size() << " node(s)\n";
  if (st.http_port > 0) std::cout << "  HTTP API at http://" << st.http_host << ":" << st.http_port << "/v1\n";
  for (const auto& p : st.processes) std::cout << "  " << p.role << " " << p.name << " pid " << p.pid << " log " << p.log << "\n";
  std::cout << "state: " << dir << "\n";
  return 0;
}

dls::cli::register_command reg{"up", [](CLI::App& app) {
  auto* sub = app.add_subcommand("up", "Start the head and all nodes of a cluster file in the background");
  auto o = std::make_shared<up_options>();
  sub->add_option("config", o->config, "Cluster YAML file")->required();
  sub->add_option("--state-dir", o->state_dir, "State directory (default $DILASERVE_STATE_DIR or ~/.dilaserve)");
  sub->add_option("--timeout", o->timeout_s, "Seconds to wait for each process to become ready");
  sub->add_option("--slo-scale", o->slo_scale,
                  "Deadline of a request without slo_ms: S x its solo latency (instead of scheduler.slo_scale)")
      ->check(CLI::Range(0.01, 1e6));
  sub->add_option("--profile-cache", o->profile_cache,
                  "Directory that keeps the step-cost profiles `up` measures, for clusters with other state "
                  "directories on this machine (default $DILASERVE_PROFILE_CACHE; none: only the state directory)")
      ->envname("DILASERVE_PROFILE_CACHE");
  return std::function<int()>([o] { return run_up(*o); });
}};

}  // namespace
