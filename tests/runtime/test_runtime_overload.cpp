// Load shedding on a running cluster (scheduler.on_overload: refuse, policy dilaserve): at
// normal load nothing is refused; a burst far above what the group can finish in time gets
// explicit refusals ("overloaded: ...") and answers, and every client hears back (nothing is
// lost); every refusal came while the group was already running at a lowered tau, and the
// group's record shows tau went down before the first refusal; after the burst the cluster
// serves normally again at the reference tau.
#define BOOST_TEST_MODULE test_runtime_overload
#include <boost/test/unit_test.hpp>

#include "cluster_fixture.hpp"

#include <cstdlib>
#include <fstream>

using dls::test::cluster;
using json = nlohmann::json;

namespace {

std::string write_jsonl(const cluster& c, const std::string& name, std::size_t n, int slo_ms) {
  auto problems = dls::test::eval_problems(n);
  auto path = c.scratch().file(name);
  std::ofstream out(path);
  for (std::size_t i = 0; i < n; ++i)
    out << json{{"prompt", problems[i % problems.size()].prompt}, {"slo_ms", slo_ms}}.dump() << "\n";
  return path;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_burst_is_refused_explicitly_after_tau_went_down_and_normal_load_is_not) {
  cluster c("local.yaml", 0,
            "scheduler: {policy: dilaserve, quality: quality/tiny-llada.json, on_overload: refuse}\n");
  auto problems = dls::test::eval_problems(1);
  auto lone = [&](int slo_ms) {
    auto r = c.cli({"submit", "--prompt", problems[0].prompt, "--slo-ms", std::to_string(slo_ms), "--json"});
    BOOST_REQUIRE_MESSAGE(r.rc == 0, r.err);
    return json::parse(r.out);
  };
  const auto first = lone(60000);
  BOOST_TEST(first["threshold"].get<double>() == 0.9);
  // The burst's SLO: five times what one request takes alone here (as in test_runtime_policy),
  // so a few requests fit in it at the reference tau and a thousand at once do not.
  const int slo_ms = std::max(20, static_cast<int>(5 * first["latency_ms"].get<double>()));

  // Normal load: requests one after another at ten per second with that SLO twenty times over.
  {
    auto path = write_jsonl(c, "normal.jsonl", 30, 20 * slo_ms);
    auto r = c.cli({"submit", "--file", path, "--rate", "10", "--json", "--timeout", "120"});
    BOOST_REQUIRE_MESSAGE(r.rc == 0, r.out + r.err);
    BOOST_TEST(json::parse(r.out)["summary"]["failed"].get<int>() == 0);
    BOOST_TEST(dls::test::only_group(c).value("refused", -1) == 0);
    BOOST_TEST(dls::test::only_group(c).value("refused_at_placement", -1) == 0);
  }

  // The burst: a thousand at once.
  constexpr std::size_t burst = 1000;
  auto path = write_jsonl(c, "burst.jsonl", burst, slo_ms);
  auto r = c.cli({"submit", "--file", path, "--json", "--timeout", "200"});
  // Some failed (refused), so submit exits 1, but it heard back from every request.
  BOOST_REQUIRE_MESSAGE(r.rc == 1, r.err);
  const auto out = json::parse(r.out);
  const auto& results = out["results"];
  BOOST_REQUIRE_EQUAL(results.size(), burst);
  int answered = 0, refused = 0, other = 0, refused_at_lowered_tau = 0;
  std::string first_reason;
  for (const auto& a : results) {
    if (a["ok"].get<bool>()) {
      ++answered;
      continue;
    }
    const auto error = a.value("error", "");
    if (error.rfind("overloaded: ", 0) != 0) {
      ++other;
      BOOST_TEST_MESSAGE("unexpected error: " << error);
      continue;
    }
    ++refused;
    if (first_reason.empty()) first_reason = error;
    // "overloaded: group NAME already at tau T: ..."
    const auto at = error.find(" already at tau ");
    BOOST_REQUIRE(at != std::string::npos);
    refused_at_lowered_tau += std::strtod(error.c_str() + at + 16, nullptr) < 0.9;
  }
  BOOST_TEST_MESSAGE("burst of " << burst << " at SLO " << slo_ms << " ms: " << answered << " answered, " << refused
                                 << " refused; first refusal: " << first_reason);
  BOOST_TEST(other == 0);
  BOOST_TEST(answered > 0);
  BOOST_TEST(refused > 0);
  BOOST_TEST(answered + refused == static_cast<int>(burst));
  BOOST_TEST(refused_at_lowered_tau == refused);
  BOOST_TEST(first_reason.find('\n') == std::string::npos);
  // The group's record: tau went down before its first refusal, and it counted them all.
  const auto g = dls::test::only_group(c);
  BOOST_TEST(g.value("refused", 0) + g.value("refused_at_placement", 0) == refused);
  BOOST_TEST_MESSAGE("refused by the group " << g.value("refused", 0) << ", at placement "
                                             << g.value("refused_at_placement", 0));
  const double lowered = g.value("first_tau_lowered_s", -1.0), first_refusal = g.value("first_refused_s", -1.0);
  BOOST_TEST(lowered >= 0);
  // A burst may be refused wholly at placement, which keeps no time; those refusals name the
  // lowered tau they saw (refused_at_lowered_tau above).
  if (g.value("refused", 0) > 0) BOOST_TEST(first_refusal >= lowered);
  // The head counted every request as finished or failed; none is left in flight.
  BOOST_TEST(dls::test::eventually(30, [&] {
    return c.json_cli({"status"})["requests"]["in_flight"].get<int>() == 0;
  }));
  const auto counts = c.json_cli({"status"})["requests"];
  // Requests refused at placement never became request actors: the head counts the others.
  BOOST_TEST(counts["failed"].get<int>() == g.value("refused", 0));

  // After the burst: a lone request runs at the reference tau again, and normal load is served
  // whole. It has a minute of SLO, as the first one: with ten burst SLOs (tens of ms) a loaded
  // machine lowered its tau for its own slack (CI, once). The cap predicts arrivals from the
  // group's last scheduler.cap_forecast_ms (2 s) of them, so a request sent while the burst is
  // still in that window may run under the cap it predicts (CI, once: tau 0.8); tau is back once
  // the window has moved past the burst.
  double tau_after = 0;
  BOOST_TEST(dls::test::eventually(20, [&] {
    tau_after = lone(60000)["threshold"].get<double>();
    return tau_after == 0.9;
  }), "tau after the burst " << tau_after);
  auto again = write_jsonl(c, "after.jsonl", 20, 20 * slo_ms);
  auto after = c.cli({"submit", "--file", again, "--rate", "10", "--json", "--timeout", "120"});
  BOOST_REQUIRE_MESSAGE(after.rc == 0, after.out + after.err);
  const auto g2 = dls::test::only_group(c);
  BOOST_TEST(g2.value("refused", 0) + g2.value("refused_at_placement", 0) == refused);
}
