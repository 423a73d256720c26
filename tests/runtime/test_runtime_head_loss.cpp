// A lost or hung head never leaves a client or a node waiting silently: a stopped head gets a
// clear connect error within the handshake timeout, a killed head ends a running submit at
// once (not after --timeout) when the cluster gives no grace window, and nodes notice a
// stopped head through BASP's connection timeout. The restart itself (write-ahead log,
// rejoin, re-attach) is test_runtime_head_restart.
#define BOOST_TEST_MODULE test_runtime_head_loss
#include <boost/test/unit_test.hpp>

#include "cluster_fixture.hpp"
#include "runtime/process.hpp"
#include "runtime/state_dir.hpp"

#include <signal.h>

#include <fstream>
#include <sstream>

namespace rt = dls::runtime;
using dls::test::cluster;

namespace {

int head_pid(const cluster& c) {
  for (auto& p : rt::load_state(c.state_dir()).processes)
    if (p.role == "head") return p.pid;
  throw std::runtime_error("no head recorded");
}

std::string node_log(const cluster& c) {
  for (auto& p : rt::load_state(c.state_dir()).processes)
    if (p.role == "node") {
      std::ifstream in(p.log);
      std::stringstream ss;
      ss << in.rdbuf();
      return ss.str();
    }
  return "";
}

// Resumes a stopped head whatever the test's outcome, so the fixture can stop the cluster.
struct resume_on_exit {
  int pid;
  ~resume_on_exit() { ::kill(pid, SIGCONT); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_stopped_head_gives_clients_an_error_and_nodes_notice_it) {
  cluster c("local.yaml");
  BOOST_REQUIRE(c.cli({"status"}).rc == 0);
  auto head = head_pid(c);
  ::kill(head, SIGSTOP);
  resume_on_exit resume{head};
  // The client's TLS handshake is bounded: it fails with a message, it does not hang.
  auto r = c.cli({"status"});
  BOOST_TEST(r.rc != 0);
  BOOST_TEST(r.err.find("is the head stopped or hung?") != std::string::npos, r.err);
  // The node's connection times out (BASP heartbeats both ways) and it leaves, saying why.
  BOOST_TEST(dls::test::eventually(20, [&] { return node_log(c).find("lost the head") != std::string::npos; }),
             node_log(c));
}

BOOST_AUTO_TEST_CASE(a_killed_head_ends_a_running_submit_at_once_without_a_grace_window) {
  // heartbeat.head_grace_ms: 0: nobody waits for the head to come back.
  cluster c("local.yaml", 0, "heartbeat: {interval_ms: 500, dead_after_ms: 3000, head_grace_ms: 0}");
  auto problems = dls::test::eval_problems(400);
  auto file = dls::test::write_prompts(c.scratch(), problems);
  // A slow stream of requests, so the head dies while most are still to come.
  auto submit = c.cli_background({"submit", "--file", file, "--rate", "100", "--timeout", "600"});
  BOOST_REQUIRE(dls::test::eventually(30, [&] {
    auto s = c.cli({"status", "--json"});
    if (s.rc != 0) BOOST_TEST_MESSAGE("status failed while the requests streamed: " << s.err);
    return s.rc == 0 && s.out.find("\"finished\":0") == std::string::npos;
  }));
  ::kill(head_pid(c), SIGKILL);
  auto r = submit.wait();  // the ctest timeout (240 s) is far below --timeout 600
  BOOST_TEST(r.rc != 0, "the submit ended normally: every request was answered before the kill");
  BOOST_TEST(r.err.find("lost the head") != std::string::npos, r.err);
}
