// The gate is the only actor a head publishes. It hands out nothing until the peer shows a
// credential of the cluster, and records which role that credential carries for the peer's
// CAF node: the endpoint, core and supervisor check every message against that record.
#include "actors/peer_roles.hpp"
#include "actors/request_admission.hpp"
#include "actors/spawn.hpp"
#include "runtime/log.hpp"
#include "runtime/state_dir.hpp"

#include <caf/all.hpp>

#include <unistd.h>

namespace dls::actors {

namespace rt = dls::runtime;

namespace {

struct gate_credentials {
  std::string admin;
  std::string submit;
  std::string node;
  peer_registry_ptr peers;
};

struct gate_state {
  static inline const char* name = "dls.gate";
};

// What each credential of the cluster file lets its holder do.
std::uint8_t client_roles(const gate_credentials& c, const std::string& presented) {
  if (rt::tokens_equal(presented, c.admin)) return role_client | role_admin;
  if (!c.submit.empty() && rt::tokens_equal(presented, c.submit)) return role_client;
  return role_none;
}

bool may_join(const gate_credentials& c, const std::string& presented) {
  return rt::tokens_equal(presented, c.admin) || (!c.node.empty() && rt::tokens_equal(presented, c.node));
}

rt::gate_actor::behavior_type gate(rt::gate_actor::stateful_pointer<gate_state> self, std::string cluster,
                                   gate_credentials creds, caf::actor core, rt::head_actor endpoint) {
  return {
      [=](rt::client_atom, const std::string& presented) -> rt::client_reply {
        rt::client_reply r;
        auto sender = self->current_sender();
        auto roles = client_roles(creds, presented);
        if (!sender) {
          // Nobody to grant a role to, and the answer has nowhere to go: the client times out.
          r.error = "the hello came without a sender";
          rt::log_line("gate", "refused a client: its hello came without a sender (the answer cannot reach it)");
          return r;
        }
        if (roles == role_none) {
          r.error = "invalid cluster token";
          rt::log_line("gate", "refused a client: invalid cluster token");
          return r;
        }
        // The role belongs to the peer's CAF node: every later message of that process to the
        // endpoint is checked against it.
        creds.peers->grant(sender->node(), roles);
        r.ok = true;
        r.cluster = cluster;
        r.head = endpoint;
        return r;
      },
      [=](rt::node_join_atom, rt::node_hello& hello) -> caf::typed_response_promise<rt::join_reply> {
        // Before the promise: making it takes the sender out of the current message.
        auto sender = self->current_sender();
        auto rp = self->make_response_promise<rt::join_reply>();
        std::string refusal;
        if (!may_join(creds, hello.token))
          refusal = "invalid cluster token";
        else if (!sender || !hello.agent || hello.agent.node() != sender->node())
          refusal = "the node agent must live in the process that joins";
        if (!refusal.empty()) {
          rt::log_line("gate", "refused node '" + hello.node + "' from " + hello.host + " (pid " +
                                   std::to_string(hello.pid) + "): " + refusal);
          rt::join_reply r;
          r.error = refusal;
          rp.deliver(r);
          return rp;
        }
        hello.token.clear();
        creds.peers->grant(sender->node(), role_node);
        self->request(core, std::chrono::seconds(30), rt::node_join_atom::value, std::move(hello))
            .then([rp](rt::join_reply& r) mutable { rp.deliver(std::move(r)); },
                  [rp](caf::error& e) mutable {
                    rt::join_reply r;
                    r.error = "head failed to register the node: " + to_string(e);
                    rp.deliver(r);
                  });
        return rp;
      },
  };
}

// -- the client endpoint: a typed facade over the head's internal actors --------------

template <class T, class... Ts>
caf::typed_response_promise<T> forward(rt::head_actor::pointer self, const caf::actor& dest,
                                       caf::duration timeout, Ts&&... xs) {
  auto rp = self->make_response_promise<T>();
  self->request(dest, timeout, std::forward<Ts>(xs)...)
      .then([rp](T& x) mutable { rp.deliver(std::move(x)); },
            [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  return rp;
}

caf::error refused(const char* what) { return caf::make_error(caf::sec::runtime_error, std::string(what)); }

rt::head_actor::behavior_type endpoint(rt::head_actor::pointer self, caf::actor core, caf::actor supervisor,
                                       caf::actor reconfigurer, gate_credentials creds,
                                       std::shared_ptr<const rt::request_checker> checker,
                                       common::decode_settings engine) {
  auto quick = caf::duration{std::chrono::seconds(10)};
  auto slow = caf::duration{std::chrono::minutes(10)};
  auto is_client = [=] { return sender_may(self, *creds.peers, role_client, "endpoint"); };
  // Admin calls carry the admin token themselves, so a forged source node id alone gets nowhere.
  auto is_admin = [=](const std::string& credential) {
    return sender_may(self, *creds.peers, role_admin, "endpoint") && rt::tokens_equal(credential, creds.admin);
  };
  return {
      [=](rt::submit_atom, rt::submit_spec& spec) -> caf::result<rt::answer> {
        if (!is_client()) return refused("not authenticated: present a cluster token to the gate first");
        if (auto refused = refusal(*checker, engine, spec)) {
          auto rp = self->make_response_promise<rt::answer>();
          rp.deliver(std::move(*refused));
          return rp;
        }
        // Every accepted request ends with an answer or an explicit error from its
        // request actor, so no timeout is needed here.
        return forward<rt::answer>(self, supervisor, caf::infinite, rt::submit_atom::value, std::move(spec));
      },
      [=](rt::cancel_atom, uint64_t tag) {
        if (!is_client()) return;
        // The sender's identity scopes the tag: a client can only withdraw its own work.
        auto client = caf::actor_cast<caf::actor>(self->current_sender());
        // Sent as the endpoint: the supervisor serves only senders of this process.
        if (client) caf::send_as(caf::actor_cast<caf::actor>(self), supervisor, rt::cancel_atom::value, client, tag);
      },
      [=](rt::status_atom) -> caf::result<std::string> {
        if (!is_client()) return refused("not authenticated: present a cluster token to the gate first");
        return forward<std::string>(self, core, quick, rt::status_atom::value);
      },
      [=](rt::actors_atom) -> caf::result<std::vector<rt::actor_info>> {
        if (!is_client()) return refused("not authenticated: present a cluster token to the gate first");
        return forward<std::vector<rt::actor_info>>(self, core, quick, rt::actors_atom::value);
      },
      [=](rt::regroup_atom, rt::regroup_spec& spec, const std::string& credential) -> caf::result<std::string> {
        if (!is_admin(credential)) return refused("permission denied: regrouping needs the admin token");
        return forward<std::string>(self, reconfigurer, slow, rt::regroup_atom::value, std::move(spec));
      },
      [=](rt::provision_atom, std::vector<double>& history, const std::string& credential) -> caf::result<std::string> {
        if (!is_admin(credential)) return refused("permission denied: provisioning regroups nodes and needs the admin token");
        return forward<std::string>(self, reconfigurer, slow, rt::provision_atom::value, std::move(history));
      },
      [=](rt::await_atom) -> caf::result<std::string> {
        if (!is_client()) return refused("not authenticated: present a cluster token to the gate first");
        return forward<std::string>(self, core, slow, rt::await_atom::value);
      },
      [=](rt::policy_atom, std::string& name, const std::string& credential) -> caf::result<std::string> {
        if (!is_admin(credential)) return refused("permission denied: switching the policy needs the admin token");
        return forward<std::string>(self, supervisor, quick, rt::policy_atom::value, std::move(name));
      },
      [=](rt::migrate_atom, uint64_t id, std::string& to, std::string& at,
          const std::string& credential) -> caf::result<std::string> {
        if (!is_admin(credential)) return refused("permission denied: migrating a request needs the admin token");
        return forward<std::string>(self, supervisor, quick, rt::migrate_atom::value, id, std::move(to), std::move(at),
                                    std::string("admin"));
      },
      [=](rt::shutdown_atom, const std::string& credential) -> caf::result<std::string> {
        if (!is_admin(credential)) return refused("permission denied: shutting down needs the admin token");
        auto rp = self->make_response_promise<std::string>();
        self->request(core, quick, rt::shutdown_atom::value)
            .then(
                [=](std::string& text) mutable {
                  rp.deliver(std::move(text));
                  // A request rather than anon_send: the core takes this only from a local sender.
                  self->request(core, quick, rt::shutdown_atom::value, caf::ok_atom::value)
                      .then([] {}, [](caf::error&) {});
                },
                [=](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
  };
}

}  // namespace

head_actors spawn_head(caf::actor_system& sys, const rt::cluster_config& file_cfg, std::function<void()> on_shutdown,
                       rt::head_journal_ptr journal) {
  // A restarted head hands each node the layout it last registered, not the file's.
  auto cfg = file_cfg;
  if (journal)
    for (auto& n : cfg.nodes)
      if (auto it = journal->recovered().layouts.find(n.name); it != journal->recovered().layouts.end()) {
        int used = 0;
        for (auto g : it->second) used += g;
        // A file edited since to give the node fewer devices wins over the log.
        if (!it->second.empty() && used <= n.devices.slots()) n.groups.assign(it->second.begin(), it->second.end());
      }
  head_actors h;
  h.peers = std::make_shared<peer_registry>();
  h.core = spawn_head_core(sys, cfg, h.peers, std::move(on_shutdown), journal);
  h.supervisor = spawn_supervisor(sys, h.core, cfg.engine, h.peers, cfg.scheduler.policy, journal);
  h.reconfigurer = spawn_reconfigurer(sys, h.core, h.supervisor, cfg);
  h.migrator = spawn_migrator(sys, h.core, h.supervisor, cfg);
  {
    // The core takes these only from actors of its own process.
    caf::scoped_actor local{sys};
    local->send(h.core, rt::register_atom::value, h.supervisor);
    auto pid = static_cast<int32_t>(::getpid());
    local->send(h.core, rt::register_atom::value,
                rt::actor_info{0, "supervisor", "supervisor", "head", pid, "ALIVE", 0, "{}"});
  }
  std::string model_problem;
  auto checker = make_request_checker(cfg, &model_problem);
  if (!model_problem.empty())
    rt::log_line("head", "cannot read the model here (" + model_problem +
                             "); submits are checked for size and numbers only, the nodes check the rest");
  gate_credentials creds{cfg.token, cfg.submit_token, cfg.node_token, h.peers};
  h.endpoint = sys.spawn(endpoint, h.core, h.supervisor, h.reconfigurer, creds, std::move(checker), cfg.engine.decode);
  h.gate = sys.spawn(gate, cfg.name, creds, h.core, h.endpoint);
  return h;
}

}  // namespace dls::actors
