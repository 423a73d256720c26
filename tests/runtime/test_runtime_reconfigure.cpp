// Splitting a TP=2 group into two TP=1 groups and merging it back while requests run loses
// nothing and changes no answer (temperature 0): requests leave the draining groups at a
// refresh boundary and move as canvases, to another node when there is one.
#define BOOST_TEST_MODULE test_runtime_reconfigure
#include <boost/test/unit_test.hpp>

#include "cluster_fixture.hpp"

#include <signal.h>

using dls::test::background_cli;
using dls::test::cluster;
using json = nlohmann::json;

namespace {

bool reconfigurer_busy(const cluster& c) {
  auto rows = c.json_cli({"actors", "--kind", "reconfigurer"});
  return rows.size() == 1 && rows[0]["details"].value("busy", false);
}

// The submit of `problems` running in the background while node0 was split into two TP=1
// groups, and the split's answer. node0 is paused while the burst is accepted (every request
// in flight or, on another node, done) and the split is on its way, so the split certainly
// meets requests node0 holds: the enqueues and the regroup travel in order over the one
// head-to-node connection.
struct split_under_load {
  background_cli submit;
  json split;
};

split_under_load split_node0_under_load(const cluster& c, const std::vector<dls::test::problem>& problems) {
  auto prompts = dls::test::write_prompts(c.scratch(), problems);
  const int n = static_cast<int>(problems.size());
  auto pid0 = c.pid_of("node0");
  ::kill(pid0, SIGSTOP);
  auto submit = c.cli_background({"submit", "--file", prompts, "--json", "--timeout", "180"});
  bool accepted = dls::test::eventually(15, [&] {
    auto counts = c.json_cli({"status"})["requests"];
    return counts["in_flight"].get<int>() + counts["finished"].get<int>() == n && counts["in_flight"].get<int>() >= 1;
  });
  auto split_cmd = c.cli_background({"reconfigure", "--node", "node0", "--groups", "1,1", "--json"});
  bool sent = accepted && dls::test::eventually(15, [&] { return reconfigurer_busy(c); });
  ::kill(pid0, SIGCONT);
  BOOST_REQUIRE(accepted);
  BOOST_REQUIRE(sent);
  auto split_out = split_cmd.wait();
  BOOST_REQUIRE_MESSAGE(split_out.rc == 0, split_out.err + split_out.out);
  auto split = json::parse(split_out.out);
  BOOST_TEST_MESSAGE("split: " << split.dump());
  BOOST_REQUIRE(split["ok"].get<bool>());
  BOOST_TEST(split["groups"].size() == 2u);
  return {std::move(submit), std::move(split)};
}

}  // namespace

BOOST_AUTO_TEST_CASE(split_and_merge_while_requests_run) {
  auto problems = dls::test::eval_problems(40);
  BOOST_REQUIRE_EQUAL(problems.size(), 40u);
  auto expected = dls::test::reference_answers("local.yaml", problems);

  // One node: the requests it held wait at the supervisor and join its new groups.
  cluster c("local.yaml", /*dead_after_ms*/ 20000);
  auto [submit, split] = split_node0_under_load(c, problems);
  BOOST_TEST(split["node_stats"]["moved"].get<int>() >= 1);

  auto merge = c.json_cli({"reconfigure", "--node", "node0", "--groups", "2"});
  BOOST_TEST_MESSAGE("merge: " << merge.dump());
  BOOST_REQUIRE(merge["ok"].get<bool>());
  BOOST_TEST(merge["groups"].size() == 1u);
  BOOST_TEST(merge["groups"][0]["degree"].get<int>() == 2);

  auto r = submit.wait();
  BOOST_REQUIRE_MESSAGE(r.rc == 0, r.err + r.out);
  auto results = json::parse(r.out)["results"];
  BOOST_REQUIRE_EQUAL(results.size(), 40u);
  int moved = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    BOOST_TEST(results[i]["ok"].get<bool>());
    BOOST_TEST(results[i]["text"].get<std::string>() == expected[i], "request " << i);
    moved += results[i]["moves"].get<int>() > 0;
  }
  BOOST_TEST(moved >= 1);

  // The directory shows the retired groups DEAD and exactly the final group ALIVE.
  auto groups = c.json_cli({"actors", "--kind", "tp_group", "--state", "ALIVE"});
  BOOST_TEST(groups.size() == 1u);
  auto all_groups = c.json_cli({"actors", "--kind", "tp_group"});
  BOOST_TEST(all_groups.size() == 4u);  // g0, then g1+g2, then g3
}

BOOST_AUTO_TEST_CASE(bad_regroup_requests_are_refused) {
  cluster c("local.yaml");
  auto too_many = c.cli({"reconfigure", "--node", "node0", "--groups", "2,1"});
  BOOST_TEST(too_many.rc == 1);
  BOOST_TEST(too_many.err.find("groups use 3 devices but node 'node0' has 2") != std::string::npos, too_many.err);
  auto unknown = c.cli({"reconfigure", "--node", "nodeX", "--groups", "1"});
  BOOST_TEST(unknown.rc == 1);
  BOOST_TEST(unknown.err.find("unknown node 'nodeX'") != std::string::npos, unknown.err);
  auto malformed = c.cli({"reconfigure", "--node", "node0", "--groups", "1,x"});
  BOOST_TEST(malformed.rc == 1);
  BOOST_TEST(malformed.err.find("must be positive sizes") != std::string::npos, malformed.err);
}

// A draining node hands each request at its refresh boundary to the supervisor, which places
// it on the other node's groups instead of holding it through the regroup; answers unchanged.
BOOST_AUTO_TEST_CASE(a_draining_node_hands_requests_at_their_boundary_to_another_node) {
  auto problems = dls::test::eval_problems(24);
  BOOST_REQUIRE_EQUAL(problems.size(), 24u);
  auto expected = dls::test::reference_answers("local.yaml", problems);

  // Two nodes: node1 serves its share of the burst while node0 is paused, and takes node0's.
  cluster c("local-2node.yaml", /*dead_after_ms*/ 20000);
  auto [submit, split] = split_node0_under_load(c, problems);
  BOOST_TEST(split["node_stats"]["handed_back"].get<int>() >= 1);

  auto r = submit.wait();
  BOOST_REQUIRE_MESSAGE(r.rc == 0, r.err + r.out);
  auto results = json::parse(r.out)["results"];
  BOOST_REQUIRE_EQUAL(results.size(), 24u);
  int to_node1 = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    BOOST_TEST(results[i]["ok"].get<bool>());
    BOOST_TEST(results[i]["text"].get<std::string>() == expected[i], "request " << i);
    to_node1 += results[i]["moves"].get<int>() > 0 && results[i]["node"].get<std::string>() == "node1";
  }
  BOOST_TEST(to_node1 >= 1);
}
