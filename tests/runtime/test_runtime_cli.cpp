// Bad command lines get one line on stderr naming the problem and exit code 2 (parse errors)
// or 1 (bad input found while running), through the real `dilaserve` binary.
#define BOOST_TEST_MODULE test_runtime_cli
#include <boost/test/unit_test.hpp>

#include "cluster_fixture.hpp"

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

namespace {

const std::string sim_cluster = std::string(DLS_SOURCE_DIR) + "/configs/sim/llada8b-h100x64.yaml";

// Runs dilaserve and checks it failed with `rc` and exactly one stderr line containing `needle`.
void expect_one_line_error(const std::vector<std::string>& args, int rc, const std::string& needle) {
  auto r = dls::test::run_cli(args);
  BOOST_TEST(r.rc == rc, args[0] << ": rc " << r.rc << ", stderr: " << r.err);
  BOOST_TEST(std::count(r.err.begin(), r.err.end(), '\n') == 1, r.err);
  BOOST_TEST(r.err.rfind("dilaserve: error: ", 0) == 0u, r.err);
  BOOST_TEST(r.err.find(needle) != std::string::npos, "'" << needle << "' not in: " << r.err);
}

std::vector<std::string> sim_args(std::vector<std::string> extra) {
  std::vector<std::string> a{"sim", "--cluster", sim_cluster, "--synthetic", "poisson", "--requests", "40"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_unknown_command_is_named_with_the_known_ones) {
  expect_one_line_error({"frobnicate"}, 2, "unknown command 'frobnicate' (commands: actors,");
}

BOOST_AUTO_TEST_CASE(an_unknown_flag_is_named) {
  expect_one_line_error(sim_args({"--frob"}), 2, "--frob");
  expect_one_line_error(sim_args({"--frob"}), 2, "(see dilaserve sim --help)");
}

BOOST_AUTO_TEST_CASE(numbers_out_of_range_name_the_option_and_the_rule) {
  expect_one_line_error(sim_args({"--slo-scale", "0"}), 2, "--slo-scale: must be > 0, got 0");
  expect_one_line_error(sim_args({"--load", "0.5,-1"}), 2, "--load: must be > 0, got -1");
  expect_one_line_error(sim_args({"--load", "abc"}), 2, "--load: 'abc' is not a number");
  expect_one_line_error(sim_args({"--rate", "nan"}), 2, "--rate: 'nan' is not a number");
  expect_one_line_error({"sim", "--cluster", sim_cluster, "--synthetic", "poisson", "--requests", "0"}, 2,
                        "--requests: must be > 0, got 0");
  expect_one_line_error({"eval", "--batch", "0"}, 2, "--batch: must be > 0, got 0");
}

BOOST_AUTO_TEST_CASE(a_missing_required_option_is_named) {
  expect_one_line_error({"sim"}, 2, "--cluster is required");
}

BOOST_AUTO_TEST_CASE(bad_sim_inputs_are_refused_while_running) {
  expect_one_line_error(sim_args({"--policies", "static,bogus"}), 1, "unknown policy 'bogus'");
  dls::test::scratch_dir dir;
  const auto trace = dir.file("bad.csv");
  std::ofstream(trace) << "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.98,12,oops\n";
  expect_one_line_error({"sim", "--cluster", sim_cluster, "--trace", trace}, 1,
                        "bad.csv:2: GeneratedTokens 'oops' is not an integer");
  std::ofstream(trace) << "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.98,12,3\n2023-11-16 18:17:04,12\n";
  expect_one_line_error({"sim", "--cluster", sim_cluster, "--trace", trace}, 1,
                        "bad.csv:3: expected TIMESTAMP,ContextTokens,GeneratedTokens, got '2023-11-16 18:17:04,12'");
  std::ofstream(trace) << "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:1x:03.98,12,3\n";
  expect_one_line_error({"sim", "--cluster", sim_cluster, "--trace", trace}, 1, "bad.csv:2: TIMESTAMP '1x' is not an integer");
  std::ofstream(trace) << "TIMESTAMP,ContextTokens,GeneratedTokens\n0.5,-3,3\n";
  expect_one_line_error({"sim", "--cluster", sim_cluster, "--trace", trace}, 1, "bad.csv:2: ContextTokens -3 is out of range");
  expect_one_line_error({"sim", "--cluster", dir.file("none.yaml"), "--synthetic", "poisson"}, 1,
                        "cannot open cluster file");
}

BOOST_AUTO_TEST_CASE(a_good_command_line_still_runs) {
  auto r = dls::test::run_cli(sim_args({"--policies", "static", "--json"}));
  BOOST_TEST(r.rc == 0, r.err);
  BOOST_TEST(r.out.find("\"results\"") != std::string::npos, r.out);
}
