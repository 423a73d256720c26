// A node whose join gets no answer joins again on a fresh connection: when the reply never
// comes (as a reply lost with its connection looks to the node) and when the connection to the
// head goes down during the join. The node is the real `dilaserve start --address` process; the
// head's side is a gate in this process on 127.0.0.1 and a free port, plain TCP, that records
// every hello and refuses the last one, so the node ends with the refusal's exit code. And at a
// real head: a join from the process of a live incarnation (what such a retry sends when the
// first join did reach the head) replaces it, while one from another process is refused.
#define BOOST_TEST_MODULE test_node_join
#include <boost/test/unit_test.hpp>

#include "cluster_fixture.hpp"
#include "runtime/caf_setup.hpp"
#include "runtime/state_dir.hpp"
#include "runtime/transport.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <mutex>
#include <vector>

namespace rt = dls::runtime;

namespace {

// What the gates saw, shared with the test's thread.
struct join_log {
  std::mutex mu;
  std::vector<rt::node_hello> hellos;
  std::size_t size() {
    std::lock_guard<std::mutex> lk(mu);
    return hellos.size();
  }
};
using join_log_ptr = std::shared_ptr<join_log>;

enum class first_join { unanswered, gate_quits };

struct gate_state {
  std::vector<caf::typed_response_promise<rt::join_reply>> unanswered;
};

// The first join is left unanswered (its promise kept, so nothing goes back) or ends the gate,
// as `first` says; a later one is refused.
rt::gate_actor::behavior_type join_gate(rt::gate_actor::stateful_pointer<gate_state> self, join_log_ptr log,
                                        first_join first) {
  return {
      [=](rt::client_atom, const std::string&) -> rt::client_reply { return {}; },
      [=](rt::node_join_atom, rt::node_hello& hello) -> caf::typed_response_promise<rt::join_reply> {
        auto rp = self->make_response_promise<rt::join_reply>();
        std::size_t seen;
        {
          std::lock_guard<std::mutex> lk(log->mu);
          log->hellos.push_back(hello);
          seen = log->hellos.size();
        }
        if (seen == 1 && first == first_join::unanswered) {
          self->state.unanswered.push_back(rp);
        } else if (seen == 1) {
          self->quit(caf::exit_reason::user_shutdown);
        } else {
          rt::join_reply r;
          r.error = "closed for this test";
          rp.deliver(r);
        }
        return rp;
      },
  };
}

struct node_run {
  dls::test::cli_result result;
  std::vector<rt::node_hello> hellos;
};

node_run run_node_against(first_join first) {
  dls::test::scratch_dir dir;
  {
    std::ofstream(dir.file("token")) << "join-test-token\n";
  }
  auto log = std::make_shared<join_log>();
  caf::actor_system_config cfg;
  rt::configure_networked_caf(cfg, {}, rt::transport_security::insecure());
  caf::actor_system sys{cfg};
  auto gate = sys.spawn(join_gate, log, first);
  auto port = rt::publish_gate(sys, gate, 0, "127.0.0.1", rt::transport_security::insecure());
  BOOST_REQUIRE_MESSAGE(port, (port ? std::string() : sys.render(port.error())));
  dls::test::background_cli node({"start", "--address", "127.0.0.1:" + std::to_string(*port), "--node", "node1",
                                  "--token-file", dir.file("token"), "--insecure"});
  rt::gate_actor second;
  if (first == first_join::gate_quits) {
    // Once the first gate has ended, a second takes its port, as a restarted head would.
    BOOST_REQUIRE(dls::test::eventually(30, [&] { return log->size() >= 1; }));
    {
      caf::scoped_actor self{sys};
      self->wait_for(gate);
    }
    sys.middleman().unpublish(gate, *port);
    second = sys.spawn(join_gate, log, first);
    auto again = rt::publish_gate(sys, second, *port, "127.0.0.1", rt::transport_security::insecure());
    BOOST_REQUIRE_MESSAGE(again, (again ? std::string() : sys.render(again.error())));
  }
  node_run out;
  out.result = node.wait();
  caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
  if (second) caf::anon_send_exit(second, caf::exit_reason::user_shutdown);
  std::lock_guard<std::mutex> lk(log->mu);
  out.hellos = log->hellos;
  return out;
}

void check_joined_again(const node_run& run, const std::string& cause) {
  const auto& r = run.result;
  const auto output = r.out + r.err;
  // The second join reached the gate and got the refusal, which ends the node as a refusal does.
  BOOST_TEST(r.rc == 2, output);
  BOOST_TEST(output.find("the head refused node 'node1': closed for this test") != std::string::npos, output);
  BOOST_TEST(output.find("join failed: " + cause) != std::string::npos, output);
  BOOST_TEST(output.find("joining again on a fresh connection") != std::string::npos, output);
  BOOST_REQUIRE(run.hellos.size() == 2u);
  // Both from the one process, the second on a fresh CAF node (a new actor system).
  BOOST_TEST(run.hellos[0].pid == run.hellos[1].pid);
  BOOST_TEST(run.hellos[0].node == "node1");
  BOOST_TEST(to_string(run.hellos[0].agent.node()) != to_string(run.hellos[1].agent.node()));
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_join_left_unanswered_is_made_again_on_a_fresh_connection) {
  check_joined_again(run_node_against(first_join::unanswered), "no answer from the head within 10 s");
}

BOOST_AUTO_TEST_CASE(a_join_whose_connection_goes_down_is_made_again_on_a_fresh_connection) {
  check_joined_again(run_node_against(first_join::gate_quits), "the connection to the head went down");
}

namespace {

// Stands in for a node agent in this process: counts the head's "you were declared DEAD".
caf::behavior counting_agent(caf::event_based_actor* self, std::shared_ptr<std::atomic<int>> told_dead) {
  self->set_default_handler(caf::drop);
  return {[=](rt::node_dead_atom) { ++*told_dead; }};
}

rt::join_reply join_as_node1(caf::actor_system& sys, const rt::gate_actor& gate, const std::string& token,
                             int32_t pid, const caf::actor& agent) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  rt::node_hello hello{token, "node1", host, pid, 0, agent};
  rt::join_reply out;
  caf::scoped_actor self{sys};
  self->request(gate, std::chrono::seconds(10), rt::node_join_atom::value, hello)
      .receive([&](rt::join_reply& r) { out = std::move(r); }, [&](caf::error& e) { out.error = sys.render(e); });
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_join_from_the_process_of_a_live_incarnation_replaces_it_and_one_from_another_is_refused) {
  dls::test::cluster c("local-2node.yaml");
  ::kill(c.pid_of("node1"), SIGKILL);
  BOOST_REQUIRE(dls::test::eventually(30, [&] { return dls::test::node_state(c, "node1") == "DEAD"; }));
  auto st = rt::load_state(c.state_dir());
  rt::transport_security security{!st.insecure, st.tls_dir, "node"};
  caf::actor_system_config cfg;
  rt::configure_networked_caf(cfg, {}, security);
  caf::actor_system sys{cfg};
  auto gate = rt::connect_gate(sys, st.head_host, static_cast<uint16_t>(st.head_port), security);
  BOOST_REQUIRE_MESSAGE(gate, (gate ? std::string() : sys.render(gate.error())));
  const auto token = rt::read_token(st.token_file);
  const auto me = static_cast<int32_t>(::getpid());
  auto first_told = std::make_shared<std::atomic<int>>(0);
  auto second_told = std::make_shared<std::atomic<int>>(0);
  auto first = sys.spawn(counting_agent, first_told);
  auto second = sys.spawn(counting_agent, second_told);
  auto other = sys.spawn(counting_agent, std::make_shared<std::atomic<int>>(0));

  auto r1 = join_as_node1(sys, *gate, token, me, first);
  BOOST_TEST(r1.ok, r1.error);
  auto r2 = join_as_node1(sys, *gate, token, me, second);
  BOOST_TEST(r2.ok, r2.error);
  BOOST_TEST(r2.incarnation == r1.incarnation + 1);
  // The replaced incarnation hears that it was declared DEAD; the new one does not.
  BOOST_TEST(dls::test::eventually(10, [&] { return first_told->load() == 1; }));
  BOOST_TEST(second_told->load() == 0);
  auto r3 = join_as_node1(sys, *gate, token, me + 1, other);
  BOOST_TEST(!r3.ok);
  BOOST_TEST(r3.error.find("has already joined (pid " + std::to_string(me) + ")") != std::string::npos, r3.error);
  for (auto& n : c.json_cli({"status"})["nodes"])
    if (n["name"] == "node1") {
      BOOST_TEST(n["pid"].get<int>() == me);
      BOOST_TEST(n["joins"].get<int>() == r2.incarnation);
    }
  for (auto& a : {first, second, other}) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}
