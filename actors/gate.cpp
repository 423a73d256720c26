// The gate is the only actor a head publishes. It hands out nothing until the peer
// shows the cluster token, so an unauthenticated peer can reach no other actor.
#include "actors/spawn.hpp"
#include "runtime/log.hpp"
#include "runtime/state_dir.hpp"

#include <caf/all.hpp>

#include <unistd.h>

namespace dls::actors {

namespace rt = dls::runtime;

namespace {

struct gate_state {
  static inline const char* name = "dls.gate";
};

rt::gate_actor::behavior_type gate(rt::gate_actor::stateful_pointer<gate_state> self, std::string cluster,
                                   std::string token, caf::actor core, rt::head_actor endpoint) {
  return {
      [=](rt::client_atom, const std::string& presented) -> rt::client_reply {
        rt::client_reply r;
        if (!rt::tokens_equal(presented, token)) {
          r.error = "invalid cluster token";
          rt::log_line("gate", "refused a client: invalid cluster token");
          return r;
        }
        r.ok = true;
        r.cluster = cluster;
        r.head = endpoint;
        return r;
      },
      [=](rt::node_join_atom, rt::node_hello& hello) -> caf::typed_response_promise<rt::join_reply> {
        auto rp = self->make_response_promise<rt::join_reply>();
        if (!rt::tokens_equal(hello.token, token)) {
          rt::log_line("gate", "refused node '" + hello.node + "' from " + hello.host + " (pid " +
                                   std::to_string(hello.pid) + "): invalid cluster token");
          rt::join_reply r;
          r.error = "invalid cluster token";
          rp.deliver(r);
          return rp;
        }
        hello.token.clear();
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

rt::head_actor::behavior_type endpoint(rt::head_actor::pointer self, caf::actor core, caf::actor supervisor,
                                       caf::actor reconfigurer) {
  auto quick = caf::duration{std::chrono::seconds(10)};
  auto slow = caf::duration{std::chrono::minutes(10)};
  return {
      [=](rt::submit_atom, rt::submit_spec& spec) {
        // Every accepted request ends with an answer or an explicit error from its
        // request actor, so no timeout is needed here.
        return forward<rt::answer>(self, supervisor, caf::infinite, rt::submit_atom::value, std::move(spec));
      },
      [=](rt::cancel_atom, uint64_t tag) {
        // The sender's identity scopes the tag: a client can only withdraw its own work.
        auto client = caf::actor_cast<caf::actor>(self->current_sender());
        if (client) caf::anon_send(supervisor, rt::cancel_atom::value, client, tag);
      },
      [=](rt::status_atom) { return forward<std::string>(self, core, quick, rt::status_atom::value); },
      [=](rt::actors_atom) {
        return forward<std::vector<rt::actor_info>>(self, core, quick, rt::actors_atom::value);
      },
      [=](rt::regroup_atom, rt::regroup_spec& spec) {
        return forward<std::string>(self, reconfigurer, slow, rt::regroup_atom::value, std::move(spec));
      },
      [=](rt::await_atom) { return forward<std::string>(self, core, slow, rt::await_atom::value); },
      [=](rt::shutdown_atom) {
        auto rp = self->make_response_promise<std::string>();
        self->request(core, quick, rt::shutdown_atom::value)
            .then(
                [=](std::string& text) mutable {
                  rp.deliver(std::move(text));
                  caf::anon_send(core, rt::shutdown_atom::value, caf::ok_atom::value);
                },
                [=](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
  };
}

}  // namespace

rt::head_actor spawn_endpoint(caf::actor_system& sys, caf::actor core, caf::actor supervisor,
                              caf::actor reconfigurer) {
  return sys.spawn(endpoint, std::move(core), std::move(supervisor), std::move(reconfigurer));
}

rt::gate_actor spawn_gate(caf::actor_system& sys, std::string cluster, std::string token, caf::actor core,
                          rt::head_actor endpoint_handle) {
  return sys.spawn(gate, std::move(cluster), std::move(token), std::move(core), std::move(endpoint_handle));
}

head_actors spawn_head(caf::actor_system& sys, const rt::cluster_config& cfg, std::function<void()> on_shutdown) {
  head_actors h;
  h.core = spawn_head_core(sys, cfg, std::move(on_shutdown));
  h.supervisor = spawn_supervisor(sys, h.core, cfg.engine);
  h.reconfigurer = spawn_reconfigurer(sys, h.core, h.supervisor);
  caf::anon_send(h.core, rt::register_atom::value, h.supervisor);
  auto pid = static_cast<int32_t>(::getpid());
  caf::anon_send(h.core, rt::register_atom::value,
                 rt::actor_info{0, "supervisor", "supervisor", "head", pid, "ALIVE", 0, "{}"});

  h.endpoint = spawn_endpoint(sys, h.core, h.supervisor, h.reconfigurer);
  h.gate = spawn_gate(sys, cfg.name, cfg.token, h.core, h.endpoint);
  return h;
}

}  // namespace dls::actors
