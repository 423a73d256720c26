// The official openai npm client against a live cluster: completions, chat and
// streaming on eval prompts of the shipped model, checked against reference answers;
// then 200 concurrent streaming clients, bounded in time, all answered, with the head's
// memory back near where it started.
#define BOOST_TEST_MODULE http_openai
#include "http_support.hpp"

#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>

using namespace dls::test;

namespace {

std::string script() { return std::string(DLS_HTTP_TESTS_DIR) + "/openai_client.mjs"; }

int run_node(const http_cluster& c, const std::vector<std::string>& args, std::string& out) {
  BOOST_TEST_REQUIRE(std::filesystem::exists(std::string(DLS_HTTP_TESTS_DIR) + "/node_modules/openai"),
                     "the openai npm package is missing: run tools/install-deps.sh");
  std::vector<std::string> argv{"env", "DLS_HTTP_URL=" + c.url("/v1"), "DLS_HTTP_KEY=" + api_key(), "timeout", "240",
                                "node", script()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv, out);
}

long rss_kib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_openai_client_gets_the_reference_answers) {
  http_cluster c;
  auto file = write_expected(c.nodes().scratch(), 12);
  std::string out;
  int rc = run_node(c, {"check", file}, out);
  BOOST_TEST(rc == 0, out);
  BOOST_TEST_MESSAGE(out);
}

BOOST_AUTO_TEST_CASE(two_hundred_concurrent_streams_all_get_their_answers) {
  http_cluster c;
  auto file = write_expected(c.nodes().scratch(), 20);
  int head = c.nodes().pid_of("head");
  std::string warm;
  BOOST_TEST_REQUIRE(run_node(c, {"concurrent", file, "20"}, warm) == 0, warm);
  long before = rss_kib(head);
  std::string out;
  int rc = run_node(c, {"concurrent", file, "200"}, out);  // `timeout 240` bounds it
  BOOST_TEST(rc == 0, out);
  BOOST_TEST_MESSAGE(out);
  // What 200 finished requests may leave behind at the head: their directory rows and
  // allocator slack, far below a leak of their streams (which would grow per request).
  constexpr long allowed_growth_kib = 48 * 1024;
  long after = 0;
  BOOST_TEST(eventually(20, [&] {
    after = rss_kib(head);
    return after - before < allowed_growth_kib;
  }), "head RSS " << before << " KiB before, " << after << " KiB after");
}
