// A node (or client) with a wrong or missing token is refused with
// a clear error on both sides, and nothing of that peer becomes reachable.
#define BOOST_TEST_MODULE test_runtime_auth
#include <boost/test/unit_test.hpp>

#include "cluster_fixture.hpp"
#include "runtime/process.hpp"
#include "runtime/state_dir.hpp"

#include <fstream>
#include <sstream>

namespace rt = dls::runtime;
using dls::test::cluster;

namespace {

std::string head_address(const cluster& c) {
  auto st = rt::load_state(c.state_dir());
  return st.head_host + ":" + std::to_string(st.head_port);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string head_log(const cluster& c) {
  for (auto& p : rt::load_state(c.state_dir()).processes)
    if (p.role == "head") return read_file(p.log);
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(wrong_token_is_refused_on_both_sides) {
  cluster c("local.yaml");
  auto bad = c.scratch().file("bad.token");
  std::ofstream(bad) << "not-the-cluster-token\n";

  // A node with the wrong token: the process exits with status 2 and says why.
  auto tls = rt::load_state(c.state_dir()).tls_dir;
  auto r = dls::test::run_cli(
      {"start", "--address", head_address(c), "--token-file", bad, "--node", "node0", "--tls-dir", tls});
  BOOST_TEST(r.rc == 2);
  BOOST_TEST(r.err.find("refused node 'node0': invalid cluster token") != std::string::npos, r.err);
  // The head logged the refusal with the peer's name.
  BOOST_TEST(head_log(c).find("refused node 'node0'") != std::string::npos);
  BOOST_TEST(head_log(c).find("invalid cluster token") != std::string::npos);

  // Nothing of that peer is in the directory: node0 is still the original process.
  auto actors = c.json_cli({"actors", "--kind", "node"});
  BOOST_REQUIRE(actors.size() == 1u);
  BOOST_TEST(actors[0]["pid"].get<int>() == c.pid_of("node0"));
  BOOST_TEST(actors[0]["restarts"].get<int>() == 0);

  // A client with the wrong token gets nothing either.
  auto status = c.cli({"status", "--address", head_address(c), "--token-file", bad});
  BOOST_TEST(status.rc != 0);
  BOOST_TEST(status.err.find("refused this client: invalid cluster token") != std::string::npos, status.err);

  // Control: the right token works through the same path.
  auto good = c.cli({"status", "--address", head_address(c), "--json"});
  BOOST_TEST(good.rc == 0, good.err);
}

BOOST_AUTO_TEST_CASE(a_second_node_with_the_right_token_but_a_taken_name_is_refused) {
  cluster c("local.yaml");
  auto st = rt::load_state(c.state_dir());
  auto r = dls::test::run_cli(
      {"start", "--address", head_address(c), "--token-file", st.token_file, "--node", "node0", "--tls-dir", st.tls_dir});
  BOOST_TEST(r.rc == 2);
  BOOST_TEST(r.err.find("has already joined") != std::string::npos, r.err);
  auto unknown = dls::test::run_cli(
      {"start", "--address", head_address(c), "--token-file", st.token_file, "--node", "nodeX", "--tls-dir", st.tls_dir});
  BOOST_TEST(unknown.rc == 2);
  BOOST_TEST(unknown.err.find("is not in the cluster file") != std::string::npos, unknown.err);
}
