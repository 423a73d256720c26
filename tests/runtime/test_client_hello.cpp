// A client's hello to the gate is sent again when no answer comes: a gate that leaves the first
// hello unanswered (as an answer lost on its way looks to the client) still lets the client in,
// and one that never answers ends in one line naming the head, not a hang. Two actor systems in
// this process, plain TCP on 127.0.0.1 and a free port.
#define BOOST_TEST_MODULE test_client_hello
#include <boost/test/unit_test.hpp>

#include "runtime/caf_setup.hpp"
#include "runtime/client.hpp"
#include "runtime/transport.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include <atomic>
#include <memory>
#include <vector>

namespace rt = dls::runtime;

namespace {

struct gate_state {
  std::vector<caf::typed_response_promise<rt::client_reply>> unanswered;
};

// Answers a hello only once it has left `ignore` of them unanswered; their promises are kept so
// that nothing at all goes back for them.
rt::gate_actor::behavior_type picky_gate(rt::gate_actor::stateful_pointer<gate_state> self,
                                         std::shared_ptr<std::atomic<int>> hellos, int ignore) {
  return {
      [=](rt::client_atom, const std::string&) -> caf::typed_response_promise<rt::client_reply> {
        auto rp = self->make_response_promise<rt::client_reply>();
        if (hellos->fetch_add(1) < ignore) {
          self->state.unanswered.push_back(rp);
          return rp;
        }
        rt::client_reply r;
        r.ok = true;
        r.cluster = "test";
        rp.deliver(r);
        return rp;
      },
      [=](rt::node_join_atom, rt::node_hello&) -> rt::join_reply { return {}; },
  };
}

struct gate_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<std::atomic<int>> hellos = std::make_shared<std::atomic<int>>(0);
  rt::cluster_address where;
  caf::actor gate_handle;

  explicit gate_fixture(int ignore) {
    rt::configure_networked_caf(cfg, {}, rt::transport_security::insecure());
    sys = std::make_unique<caf::actor_system>(cfg);
    auto gate = sys->spawn(picky_gate, hellos, ignore);
    gate_handle = caf::actor_cast<caf::actor>(gate);
    auto port = rt::publish_gate(*sys, gate, 0, "127.0.0.1", rt::transport_security::insecure());
    BOOST_REQUIRE_MESSAGE(port, (port ? std::string() : sys->render(port.error())));
    where.host = "127.0.0.1";
    where.port = *port;
    where.token = "t";
    where.security = rt::transport_security::insecure();
  }
  // An actor system waits for its actors when it ends: the gate must quit first.
  ~gate_fixture() { caf::anon_send_exit(gate_handle, caf::exit_reason::user_shutdown); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_hello_left_unanswered_is_sent_again_and_the_second_answer_lets_the_client_in) {
  gate_fixture g(1);
  caf::actor_system_config cfg;
  rt::configure_networked_caf(cfg, {}, rt::transport_security::insecure());
  caf::actor_system client{cfg};
  BOOST_CHECK_NO_THROW(rt::connect_head(client, g.where));
  BOOST_TEST(g.hellos->load() == 2);
}

BOOST_AUTO_TEST_CASE(a_gate_that_never_answers_ends_in_one_line_naming_the_head) {
  gate_fixture g(1 << 20);
  caf::actor_system_config cfg;
  rt::configure_networked_caf(cfg, {}, rt::transport_security::insecure());
  caf::actor_system client{cfg};
  try {
    rt::connect_head(client, g.where);
    BOOST_FAIL("connect_head returned without an answer");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("the head at 127.0.0.1:" + std::to_string(g.where.port) + " did not answer") !=
                   std::string::npos,
               what);
    BOOST_TEST(what.find('\n') == std::string::npos);
  }
  // Every re-send reached the gate: more than one hello within the budget.
  BOOST_TEST(g.hellos->load() > 1);
}
