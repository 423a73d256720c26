// Strict SLOs on a running cluster (scheduler.on_miss: reject, policy dilaserve): a request
// that cannot meet its deadline even alone is refused at once with a one-line reason; a burst
// far above what the group can finish in time is partly refused ("refused (on_miss: reject):
// ... cannot meet its deadline: ..."), the rest answered, every client hears back; the group counts these
// refusals apart from load shedding; a request with room is answered as before.
#define BOOST_TEST_MODULE test_runtime_on_miss
#include <boost/test/unit_test.hpp>

#include "cluster_fixture.hpp"

#include <fstream>

using dls::test::cluster;
using json = nlohmann::json;

namespace {

constexpr const char* strict_prefix = "refused (on_miss: reject): ";

}  // namespace

BOOST_AUTO_TEST_CASE(requests_that_cannot_meet_their_deadline_are_refused_at_admission) {
  cluster c("local.yaml", 0, "scheduler: {policy: dilaserve, quality: quality/tiny-llada.json, on_miss: reject}\n");
  auto problems = dls::test::eval_problems(1);
  auto lone = [&](int slo_ms) {
    return c.cli({"submit", "--prompt", problems[0].prompt, "--slo-ms", std::to_string(slo_ms), "--json"});
  };
  // Room to spare: answered at the reference tau.
  auto first = lone(60000);
  BOOST_REQUIRE_MESSAGE(first.rc == 0, first.err);
  const auto answer = json::parse(first.out);
  BOOST_TEST(answer["threshold"].get<double>() == 0.9);
  const double alone_ms = answer["latency_ms"].get<double>();

  // A deadline of 1 ms: the steps alone take longer at any tau, so the group refuses it.
  auto tight = lone(1);
  BOOST_TEST(tight.rc != 0);
  const auto refusal = json::parse(tight.out);
  BOOST_TEST(!refusal["ok"].get<bool>());
  BOOST_TEST(!refusal["slo_met"].get<bool>());  // a refusal is a miss
  const auto line = refusal.value("error", "");
  BOOST_TEST_MESSAGE("tight: " << line);
  BOOST_TEST(line.rfind(strict_prefix, 0) == 0, line);
  BOOST_TEST(line.find('\n') == std::string::npos);
  BOOST_TEST(line.find("cannot meet its deadline") != std::string::npos, line);
  BOOST_TEST(line.find("alone at tau") != std::string::npos, line);
  BOOST_TEST(dls::test::only_group(c).value("rejected_on_miss", -1) == 1);

  // A burst of 400 at once, each with five times its solo latency (the group steps 8 at a time:
  // at most about 40 of them fit), and 40 with a minute each, which the group has room for.
  const int slo_ms = std::max(20, static_cast<int>(5 * alone_ms));
  constexpr std::size_t tight_n = 400, roomy_n = 40, burst = tight_n + roomy_n;
  auto many = dls::test::eval_problems(burst);
  auto path = c.scratch().file("burst.jsonl");
  {
    std::ofstream out(path);
    for (std::size_t i = 0; i < burst; ++i)
      out << json{{"prompt", many[i % many.size()].prompt}, {"slo_ms", i % 11 == 10 ? 60000 : slo_ms}}.dump() << "\n";
  }
  auto r = c.cli({"submit", "--file", path, "--json", "--timeout", "200"});
  BOOST_REQUIRE_MESSAGE(r.rc == 1, r.err);  // some failed (refused), and every request was heard
  const auto results = json::parse(r.out)["results"];
  BOOST_REQUIRE_EQUAL(results.size(), burst);
  int answered = 0, refused = 0, other = 0, roomy_answered = 0;
  std::string owed;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& a = results[i];
    if (a["ok"].get<bool>()) {
      ++answered;
      roomy_answered += i % 11 == 10;
      continue;
    }
    const auto error = a.value("error", "");
    if (error.rfind(strict_prefix, 0) != 0) {
      ++other;
      BOOST_TEST_MESSAGE("unexpected error: " << error);
      continue;
    }
    ++refused;
    BOOST_TEST(error.find('\n') == std::string::npos);
    BOOST_TEST(error.find("cannot meet its deadline: ") != std::string::npos, error);
    if (owed.empty() && error.find("the group owes") != std::string::npos) owed = error;
  }
  BOOST_TEST_MESSAGE("burst of " << burst << " at SLO " << slo_ms << " ms: " << answered << " answered, " << refused
                                 << " refused; " << owed);
  BOOST_TEST(other == 0);
  BOOST_TEST(roomy_answered == static_cast<int>(roomy_n));
  BOOST_TEST(refused > 0);
  BOOST_TEST(answered + refused == static_cast<int>(burst));
  // Counted apart: strict refusals in their own field, none as load shedding.
  const auto g = dls::test::only_group(c);
  BOOST_TEST(g.value("rejected_on_miss", 0) == refused + 1);
  BOOST_TEST(g.value("refused", -1) == 0);
  BOOST_TEST(dls::test::eventually(30, [&] {
    return c.json_cli({"status"})["requests"]["in_flight"].get<int>() == 0;
  }));
  // After the burst a request with room is served again.
  auto after = lone(60000);
  BOOST_TEST(after.rc == 0, after.err);
}

// Per request (`submit --on-miss reject`, the JSON field "on_miss" over HTTP) on a cluster that
// serves late requests by default: only the strict request is refused.
BOOST_AUTO_TEST_CASE(a_client_may_ask_for_a_strict_slo_per_request) {
  cluster c("local.yaml", 0, "scheduler: {policy: dilaserve, quality: quality/tiny-llada.json}\n");
  auto problems = dls::test::eval_problems(1);
  auto r = c.cli({"submit", "--prompt", problems[0].prompt, "--slo-ms", "1", "--on-miss", "reject", "--json"});
  BOOST_TEST(r.rc != 0);
  const auto refusal = json::parse(r.out);
  BOOST_TEST(refusal.value("error", "").rfind(strict_prefix, 0) == 0, r.out);
  auto late = c.cli({"submit", "--prompt", problems[0].prompt, "--slo-ms", "1", "--json"});
  BOOST_TEST_REQUIRE(late.rc == 0, late.err);
  const auto answer = json::parse(late.out);
  BOOST_TEST(answer["ok"].get<bool>());
  BOOST_TEST(!answer["slo_met"].get<bool>());  // served late, as on_miss: serve says
  BOOST_TEST(dls::test::only_group(c).value("rejected_on_miss", -1) == 1);
  const auto bad = c.cli({"submit", "--prompt", "x", "--on-miss", "drop"});
  BOOST_TEST(bad.rc == 2);
  BOOST_TEST(bad.err.find("--on-miss") != std::string::npos, bad.err);
}
