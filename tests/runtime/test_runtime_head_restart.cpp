// SIGKILL of the head mid-load: `up`'s watchdog restarts it with --recover from the write-ahead
// log, on the same port; the node joins it again instead of exiting, the requests that were in
// flight resume from their last canvas, and the running `submit` reconnects and re-attaches to
// them by key. Every accepted request is answered (with the answer a single device gives), and
// the policy and the layout set before the crash survive it.
#define BOOST_TEST_MODULE test_runtime_head_restart
#include <boost/test/unit_test.hpp>

#include "cluster_fixture.hpp"
#include "runtime/process.hpp"
#include "runtime/state_dir.hpp"

#include <signal.h>

#include <fstream>
#include <sstream>

namespace rt = dls::runtime;
using dls::test::cluster;
using json = nlohmann::json;

namespace {

int head_pid(const cluster& c) {
  for (auto& p : rt::load_state(c.state_dir()).processes)
    if (p.role == "head") return p.pid;
  throw std::runtime_error("no head recorded");
}

std::string log_of(const cluster& c, const std::string& role) {
  for (auto& p : rt::load_state(c.state_dir()).processes)
    if (p.role == role) {
      std::ifstream in(p.log);
      std::stringstream ss;
      ss << in.rdbuf();
      return ss.str();
    }
  return "";
}

json node_row(const json& status, const std::string& name) {
  for (auto& n : status["nodes"])
    if (n["name"] == name) return n;
  return json::object();
}

int groups_on(const json& status, const std::string& node) {
  int k = 0;
  for (auto& g : status["groups"]) k += g["node"] == node;
  return k;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_head_killed_mid_load_is_restarted_and_every_accepted_request_is_answered) {
  const std::size_t n = 400;
  auto problems = dls::test::eval_problems(n);
  BOOST_REQUIRE_EQUAL(problems.size(), n);
  // tau = 1 commits one token per step, so answers are exact and requests stay in flight longer.
  auto expected = dls::test::reference_answers("local.yaml", problems, 1.0);
  cluster c("local.yaml");
  auto prompts = dls::test::write_prompts(c.scratch(), problems);

  // State the restarted head must keep: a policy switched at run time and a split layout.
  BOOST_REQUIRE(c.cli({"policy", "set", "deadline"}).rc == 0);
  auto split = c.cli({"reconfigure", "--node", "node0", "--groups", "1,1"});
  BOOST_REQUIRE_MESSAGE(split.rc == 0, split.err + split.out);
  BOOST_REQUIRE_EQUAL(groups_on(c.json_cli({"status"}), "node0"), 2);

  const int port_before = rt::load_state(c.state_dir()).head_port;
  // The path overhead the head measured at startup (its deadlines count it).
  const auto overhead_before = c.json_cli({"status"}).at("slo_request_overhead_ms").get<double>();
  const int old_head = head_pid(c);
  auto submit = c.cli_background(
      {"submit", "--file", prompts, "--threshold", "1", "--rate", "300", "--json", "--timeout", "180"});
  // Kill it while requests are in flight and some already answered.
  BOOST_REQUIRE(dls::test::eventually(60, [&] {
    auto s = c.cli({"status", "--json"});
    if (s.rc != 0) return false;
    auto j = json::parse(s.out, nullptr, false);
    return j.is_object() && j["requests"]["finished"].get<int>() > 0 && j["requests"]["in_flight"].get<int>() >= 10;
  }));
  ::kill(old_head, SIGKILL);

  auto r = submit.wait();
  BOOST_REQUIRE_MESSAGE(r.rc == 0, r.err + r.out);
  auto results = json::parse(r.out)["results"];
  BOOST_REQUIRE_EQUAL(results.size(), n);
  std::size_t ok = 0, resumed = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& x = results[i];
    // Answered, or explicitly failed: never silently lost.
    BOOST_TEST((x["ok"].get<bool>() || !x.value("error", "").empty()), "request " << i);
    if (!x["ok"].get<bool>()) continue;
    ++ok;
    BOOST_TEST(x["text"].get<std::string>() == expected[i], "request " << i);
    resumed += x["moves"].get<int>() > 0;
  }
  BOOST_TEST(ok * 100 >= n * 99, ok << " of " << n << " answered");
  BOOST_TEST(resumed >= 1u, "no request was in flight across the restart");

  // A new head, on the same port, with the node back and the pre-crash policy and layout.
  const int new_head = head_pid(c);
  BOOST_TEST(new_head != old_head);
  BOOST_TEST(rt::process_alive(new_head));
  BOOST_TEST(rt::load_state(c.state_dir()).head_port == port_before);
  auto status = c.json_cli({"status"});
  BOOST_TEST(status["policy"] == "deadline");
  // It keeps the measured figure from its log rather than probing among the recovered requests.
  BOOST_TEST(dls::test::eventually(30, [&] {
    return c.json_cli({"status"}).value("slo_request_overhead_ms", -1.0) == overhead_before;
  }));
  auto node = node_row(status, "node0");
  BOOST_TEST(node["state"] == "ALIVE");
  BOOST_TEST(node["joins"].get<int>() >= 2);
  BOOST_TEST(groups_on(status, "node0") == 2);
  auto head_log = log_of(c, "head");
  BOOST_TEST(head_log.find("restarting it with --recover") != std::string::npos, head_log);
  BOOST_TEST(head_log.find("resuming ") != std::string::npos, head_log);
  BOOST_TEST(log_of(c, "node").find("joining again") != std::string::npos);
  // The restarted head serves new work too, and `down` stops it and its watchdog.
  auto one = c.cli({"submit", "--prompt", problems[0].prompt, "--threshold", "1", "--json"});
  BOOST_REQUIRE_MESSAGE(one.rc == 0, one.err);
  BOOST_TEST(json::parse(one.out)["text"] == expected[0]);
  auto down = c.cli({"down"});
  BOOST_TEST(down.rc == 0, down.err);
  BOOST_TEST(down.out.find("skipped") == std::string::npos, down.out);
  BOOST_TEST(!rt::process_alive(new_head));
}

BOOST_AUTO_TEST_CASE(a_node_outlives_a_lost_head_only_for_the_grace_window) {
  // A short window, so that the test sees the node give up.
  cluster c("local.yaml", 0, "heartbeat: {interval_ms: 500, dead_after_ms: 3000, head_grace_ms: 1500}");
  auto node = c.pid_of("node0");
  // Stop the watchdog first so that nothing restarts the head.
  int watchdog = 0;
  for (auto& p : rt::load_state(c.state_dir()).processes)
    if (p.role == "head-watchdog") watchdog = p.pid;
  BOOST_REQUIRE(watchdog > 0);
  ::kill(watchdog, SIGKILL);
  ::kill(head_pid(c), SIGKILL);
  BOOST_TEST(rt::wait_exit(node, 30000));
  auto log = log_of(c, "node");
  BOOST_TEST(log.find("joining again within 1500 ms") != std::string::npos, log);
  BOOST_TEST(log.find("cannot reach the head") != std::string::npos, log);
}

BOOST_AUTO_TEST_CASE(a_restarted_head_learns_again_which_nodes_wired_their_data_plane) {
  // The nodes keep their UCX endpoints across the head's crash; asked to wire them again by the
  // new head, they only report that they are wired, and `actors` lists the peers as before.
  cluster c("local-2node.yaml");
  auto wired_both = [&] {
    auto r = c.cli({"actors", "--kind", "node", "--json"});
    if (r.rc != 0) return false;
    auto nodes = json::parse(r.out, nullptr, false);
    if (!nodes.is_array() || nodes.size() != 2u) return false;
    for (const auto& a : nodes)
      if (a["details"]["ucx"]["peers"] != json::array({a["node"] == "node0" ? "node1" : "node0"})) return false;
    return true;
  };
  BOOST_REQUIRE(dls::test::eventually(30, wired_both));
  const int old_head = head_pid(c);
  ::kill(old_head, SIGKILL);
  BOOST_REQUIRE(dls::test::eventually(60, [&] {
    auto r = c.cli({"status", "--json"});
    if (r.rc != 0) return false;
    auto s = json::parse(r.out, nullptr, false);
    if (!s.is_object()) return false;
    for (const char* name : {"node0", "node1"}) {
      const auto row = node_row(s, name);
      if (row.value("joins", 0) < 2 || row.value("state", std::string()) != "ALIVE") return false;
    }
    return true;
  }));
  BOOST_TEST(head_pid(c) != old_head);
  BOOST_TEST(dls::test::eventually(30, wired_both));
  BOOST_TEST(log_of(c, "head").find("restarting it with --recover") != std::string::npos);
}
