// A separate CAF application that uses a DiLaServe cluster through its public header
// (runtime/messages.hpp): it connects to the head with the cluster token, optionally
// hosts one of the cluster's nodes inside its own actor system, and submits prompts
// from an event-based actor of its own, printing each streamed block and answer.
//
//   embed_client --address 127.0.0.1:6390 --token-file ~/.dilaserve/token [--as-node node1] PROMPT...
#include "actors/node_parts.hpp"  // only for --as-node
#include "runtime/caf_setup.hpp"
#include "runtime/client.hpp"
#include "runtime/messages.hpp"
#include "runtime/state_dir.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include <future>
#include <iostream>

namespace rt = dls::runtime;

namespace {

struct client_state {
  std::size_t pending = 0;
  int failures = 0;
};

// Submits every prompt at once and quits after the last answer. Blocks arrive as
// plain messages, answers as responses to the typed request.
caf::behavior client(caf::stateful_actor<client_state>* self, rt::head_actor head, std::vector<std::string> prompts,
                     std::promise<int>* done) {
  self->state.pending = prompts.size();
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    rt::submit_spec spec;
    spec.prompt = prompts[i];
    spec.stream = true;
    spec.tag = i;
    spec.client = caf::actor_cast<caf::actor>(self);
    self->request(head, caf::infinite, rt::submit_atom::value, spec)
        .then(
            [=](const rt::answer& a) {
              if (a.ok)
                std::cout << "[" << a.tag << "] answer '" << a.text << "' in " << a.latency_ms << " ms, " << a.steps
                          << " steps on " << a.group << "\n";
              else
                std::cout << "[" << a.tag << "] error: " << a.error << "\n";
              self->state.failures += !a.ok;
              if (--self->state.pending == 0) {
                done->set_value(self->state.failures == 0 ? 0 : 1);
                self->quit();
              }
            },
            [=](caf::error& e) {
              std::cout << "submit failed: " << to_string(e) << "\n";
              ++self->state.failures;
              if (--self->state.pending == 0) {
                done->set_value(1);
                self->quit();
              }
            });
  }
  return {
      [=](const rt::block_chunk& c) { std::cout << "[" << c.tag << "] block " << c.block << ": " << c.text << "\n"; },
  };
}

}  // namespace

int main(int argc, char** argv) {
  std::string address, token_file, as_node, tls_dir;
  bool insecure = false;
  std::vector<std::string> prompts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--address" || a == "--token-file" || a == "--as-node" || a == "--tls-dir") && i + 1 < argc) {
      (a == "--address" ? address : a == "--token-file" ? token_file : a == "--tls-dir" ? tls_dir : as_node) = argv[++i];
    } else if (a == "--insecure") {
      insecure = true;
    } else {
      prompts.push_back(a);
    }
  }
  if (address.empty() || token_file.empty() || prompts.empty()) {
    std::cerr << "usage: embed_client --address HOST:PORT --token-file F (--tls-dir DIR | --insecure) [--as-node NAME] "
                 "PROMPT...\n";
    return 2;
  }
  try {
    auto where = rt::find_cluster("", address, token_file, tls_dir, insecure);
    // A process that hosts a node presents the node certificate; a plain client the client one.
    if (!as_node.empty() && where.security.tls) where.security.role = "node";
    caf::actor_system_config cfg;
    rt::configure_networked_caf(cfg, {}, where.security);  // DiLaServe's message types + TLS
    caf::actor_system sys{cfg};
    caf::actor agent;
    if (!as_node.empty()) {
      // Host a node of the cluster in this process: same agent as `dilaserve start`.
      auto gate = rt::connect_gate(sys, where.host, static_cast<uint16_t>(where.port), where.security);
      if (!gate) throw std::runtime_error("cannot reach the head: " + sys.render(gate.error()));
      std::promise<void> ready;
      dls::actors::node_hooks hooks;
      hooks.on_ready = [&ready](const std::string&) { ready.set_value(); };
      hooks.on_exit = [&ready](int code, const std::string& why) {
        if (code != 0) {
          std::cerr << "node stopped: " << why << "\n";
          try { ready.set_exception(std::make_exception_ptr(std::runtime_error(why))); } catch (...) {}
        }
      };
      agent = dls::actors::spawn_node_agent(sys, *gate, where.token, as_node, hooks);
      ready.get_future().get();
      std::cout << "hosting node '" << as_node << "' in this process\n";
    }
    auto head = rt::connect_head(sys, where);
    std::promise<int> done;
    auto result = done.get_future();
    sys.spawn(client, head, prompts, &done);
    int rc = result.get();
    if (agent) caf::anon_send_exit(agent, caf::exit_reason::user_shutdown);  // the node leaves the cluster
    return rc;
  } catch (const std::exception& e) {
    std::cerr << "embed_client: " << e.what() << "\n";
    return 1;
  }
}
