#include "actors/processes.hpp"

#include "actors/node_parts.hpp"
#include "actors/spawn.hpp"
#include "actors/stall_probe.hpp"
#include "gateway/gateway.hpp"
#include "runtime/caf_setup.hpp"
#include "runtime/log.hpp"
#include "runtime/process.hpp"
#include "runtime/stop_signal.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>

#include <atomic>
#include <iostream>
#include <optional>
#include <memory>
#include <mutex>

namespace dls::actors {

namespace rt = dls::runtime;

namespace {

// The HTTP gateway, when the cluster file enables one: it serves in this process and
// reaches the cluster through the head endpoint. Returns null when it is off; throws
// std::runtime_error (one line) when it cannot start.
std::unique_ptr<gateway::http_gateway> start_http_gateway(caf::actor_system& sys, const rt::cluster_config& cfg,
                                                          const head_actors& head) {
  if (!cfg.http.enabled) return nullptr;
  auto gw = std::make_unique<gateway::http_gateway>(sys, cfg, head.endpoint);
  rt::log_line("head", "HTTP API on http://" + cfg.http.host + ":" + std::to_string(gw->port()));
  return gw;
}

}  // namespace

int run_head(const rt::cluster_config& cfg, const head_options& opts) {
  rt::stop_signal stop;  // before any CAF thread exists, so they inherit the signal mask
  caf::actor_system_config caf_cfg;
  rt::configure_networked_caf(caf_cfg, cfg.head_process_caf_args(), opts.security);
  caf::actor_system sys{caf_cfg};
  spawn_stall_probe(sys, "head");
  rt::head_journal_ptr journal;
  if (!opts.state_dir.empty()) {
    try {
      journal = std::make_shared<rt::head_journal>(opts.state_dir, opts.recover,
                                                 static_cast<std::size_t>(cfg.retention.finished_requests));
    } catch (const std::exception& e) {
      std::cerr << "dilaserve: error: " << e.what() << "\n";
      return 1;
    }
  } else if (opts.recover) {
    std::cerr << "dilaserve: error: --recover needs the state directory that holds head.wal\n";
    return 1;
  }
  // A restarted head must be found where its nodes and clients look: the port it had.
  auto want_port = cfg.head_port;
  if (journal && opts.recover && want_port == 0 && journal->recovered().port > 0)
    want_port = static_cast<uint16_t>(journal->recovered().port);
  auto head = spawn_head(sys, cfg, [&stop] { stop.notify(0); }, journal);
  auto port = rt::publish_gate(sys, head.gate, want_port, cfg.head_host, opts.security);
  if (!port) {
    std::cerr << "dilaserve: error: cannot listen on " << cfg.head_host << ":" << want_port << " ("
              << sys.render(port.error()) << ")\n";
    for (auto& a : {head.core, head.supervisor, head.reconfigurer, head.migrator}) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(head.endpoint, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(head.gate, caf::exit_reason::user_shutdown);
    return 1;
  }
  if (journal) {
    try {
      journal->port(*port);
    } catch (const std::exception& e) {
      rt::log_line("head", std::string("cannot log the port: ") + e.what());
    }
  }
  rt::log_line("head", std::string(opts.recover ? "recovered " : "") + "cluster '" + cfg.name + "' listening on " + cfg.head_host + ":" + std::to_string(*port) +
                           (opts.security.tls ? " with mutual TLS (" + opts.security.dir + ")"
                                              : std::string(" over PLAIN TCP (auth.insecure: true)")) +
                           " (config " + cfg.file + ")");
  std::unique_ptr<gateway::http_gateway> http;
  try {
    http = start_http_gateway(sys, cfg, head);
  } catch (const std::exception& e) {
    std::cerr << "dilaserve: error: " << e.what() << "\n";
    sys.middleman().unpublish(head.gate, *port);
    for (auto& a : {head.core, head.supervisor, head.reconfigurer, head.migrator}) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(head.endpoint, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(head.gate, caf::exit_reason::user_shutdown);
    return 1;
  }
  rt::signal_ready(opts.ready_fd, "port " + std::to_string(*port) + (http ? " http " + std::to_string(http->port()) : ""));
  int code = stop.wait();
  rt::log_line("head", "stopping");
  http.reset();  // before the actors it talks to
  if (opts.security.tls) {
    // caf/openssl/unpublish.hpp does not compile in 0.17.6; its middleman actor takes the
    // same message as the plain one.
    caf::scoped_actor local{sys};
    local->request(sys.openssl_manager().actor_handle(), std::chrono::seconds(5), caf::unpublish_atom::value,
                   head.gate.address(), *port)
        .receive([] {}, [](caf::error&) {});
  } else {
    sys.middleman().unpublish(head.gate, *port);
  }
  for (auto& a : {head.core, head.supervisor, head.reconfigurer, head.migrator}) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(head.endpoint, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(head.gate, caf::exit_reason::user_shutdown);
  head = {};
  return code;
}

namespace {

// Between attempts to reach a lost head: a closed port refuses at once, so this only bounds how
// often a node knocks while the head is restarted (a watchdog restart takes about a second).
constexpr auto rejoin_interval = std::chrono::milliseconds(200);

// The exit codes a node agent reports when it lost its head and was told to wait for it, and
// when its join got no answer; any code a process really exits with is below 256.
constexpr int head_lost_code = 1000;
constexpr int join_lost_code = 1001;

// How long a node whose first join got no answer keeps joining again: the time one join took
// to fail before such retries existed, so `up` waits no longer than it did.
constexpr auto first_join_window = std::chrono::seconds(30);

}  // namespace

int run_node(const node_options& opts) {
  rt::stop_signal stop;
  auto where = opts.host + ":" + std::to_string(opts.port);
  auto kept = std::make_shared<loaded_model>();
  // Set while the process joins again, after a lost head (its grace window) or a join that got
  // no answer: when the window ends and why. Within it a head that cannot be reached is tried
  // again.
  std::optional<std::chrono::steady_clock::time_point> retry_until;
  std::string lost_why;
  const auto first_join_until = std::chrono::steady_clock::now() + first_join_window;
  // Only the first successful join reports readiness to `up`; the pipe is closed after it.
  auto reported = std::make_shared<std::atomic<bool>>(false);
  for (;;) {
    // A fresh actor system per join: no connection, proxy or cached endpoint of a lost head
    // survives into the next one, only the loaded weights do.
    caf::actor_system_config caf_cfg;
    rt::configure_networked_caf(caf_cfg, opts.caf_args, opts.security);
    caf::actor_system sys{caf_cfg};
    spawn_stall_probe(sys, "node " + opts.node);
    auto gate = rt::connect_gate(sys, opts.host, static_cast<uint16_t>(opts.port), opts.security);
    if (!gate) {
      if (retry_until && std::chrono::steady_clock::now() + rejoin_interval < *retry_until) {
        if (auto code = stop.wait_for(rejoin_interval)) return *code;  // stopped while waiting
        continue;
      }
      std::cerr << "dilaserve: error: " << (retry_until ? "node '" + opts.node + "': " + lost_why + ", and " : "")
                << "cannot reach the head at " << where << " (" << sys.render(gate.error()) << ")\n";
      return 1;
    }
    auto failure = std::make_shared<std::string>();
    auto failure_mu = std::make_shared<std::mutex>();
    auto grace_ms = std::make_shared<std::atomic<int>>(0);
    auto note = [failure, failure_mu](const std::string& why) {
      std::lock_guard<std::mutex> lk(*failure_mu);
      if (failure->empty()) *failure = why;
    };
    node_hooks hooks;
    hooks.on_ready = [fd = opts.ready_fd, reported](const std::string& line) {
      if (!reported->exchange(true)) rt::signal_ready(fd, line);
    };
    hooks.on_exit = [&stop, note](int code, const std::string& why) {
      note(why);
      stop.notify(code);
    };
    hooks.on_head_lost = [&stop, note, grace_ms](const std::string& why, int grace) {
      note(why);
      grace_ms->store(grace);
      stop.notify(head_lost_code);
    };
    hooks.on_join_lost = [&stop, note](const std::string& why) {
      note("join failed: " + why);
      stop.notify(join_lost_code);
    };
    hooks.kept = kept;
    auto agent = spawn_node_agent(sys, *gate, opts.token, opts.node, hooks);
    int code = stop.wait();
    caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);
    agent = nullptr;
    auto why = [&] {
      std::lock_guard<std::mutex> lk(*failure_mu);
      return *failure;
    }();
    if (code == head_lost_code) {
      lost_why = why;
      retry_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms->load());
      stop.reset();
      continue;  // the actor system ends here, with every actor of this join
    }
    if (code == join_lost_code) {
      // A lost join keeps the window it failed in: the grace of a lost head, or the first join's.
      if (!retry_until) retry_until = first_join_until;
      lost_why = why;
      stop.reset();
      if (std::chrono::steady_clock::now() + rejoin_interval < *retry_until) {
        if (auto stopped = stop.wait_for(rejoin_interval)) return *stopped;
        continue;
      }
      std::cerr << "dilaserve: error: node '" << opts.node << "' (head " << where << "): " << why << "\n";
      return 1;
    }
    if (code != 0) std::cerr << "dilaserve: error: node '" << opts.node << "' (head " << where << "): " << why << "\n";
    return code;
  }
}

}  // namespace dls::actors
