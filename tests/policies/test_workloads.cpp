#define BOOST_TEST_MODULE policies_workloads
#include <boost/test/unit_test.hpp>

#include "sim/suite.hpp"
#include "sim/workload.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

using namespace dls;
namespace tt = boost::test_tools;

namespace {

const std::string src = DLS_SOURCE_DIR;

struct moments {
  double mean = 0, cv = 0;
};
moments of(const std::vector<double>& x) {
  double s = 0, s2 = 0;
  for (double v : x) s += v;
  const double m = s / static_cast<double>(x.size());
  for (double v : x) s2 += (v - m) * (v - m);
  return {m, std::sqrt(s2 / static_cast<double>(x.size() - 1)) / m};
}

double median(std::vector<double> x) {
  std::nth_element(x.begin(), x.begin() + static_cast<long>(x.size() / 2), x.end());
  return x[x.size() / 2];
}

std::filesystem::path temp_dir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace

BOOST_AUTO_TEST_CASE(log_normal_lengths_have_the_stated_median_and_mean) {
  // Median p50 and mean exp(mu + sigma^2 / 2), sigma = ln(p99 / p50) / z_0.99. For p50 400,
  // p99 2,000: sigma 0.6918, mean 508.5. 200,000 draws: standard error of the mean 0.17 %.
  sim::rng gen(7);
  sim::length_dist d{400, 2000, 1, 1 << 20};
  std::vector<double> x;
  for (int i = 0; i < 200000; ++i) x.push_back(sim::draw_length(d, gen));
  const double sigma = std::log(5.0) / 2.3263478740408408;
  BOOST_TEST(median(x) == 400.0, tt::tolerance(0.01));
  BOOST_TEST(of(x).mean == 400.0 * std::exp(sigma * sigma / 2), tt::tolerance(0.01));
  // 99th percentile within 3 % (nearest rank).
  std::sort(x.begin(), x.end());
  BOOST_TEST(x[static_cast<std::size_t>(0.99 * x.size())] == 2000.0, tt::tolerance(0.03));
  // Clamping keeps every draw in [min, max].
  sim::length_dist c{160, 500, 50, 500};
  for (int i = 0; i < 20000; ++i) {
    const int v = sim::draw_length(c, gen);
    BOOST_TEST_REQUIRE((v >= 50 && v <= 500));
  }
}

BOOST_AUTO_TEST_CASE(a_mixture_draws_each_component_by_weight) {
  // Disjoint ranges tell the components apart: 0.25 / 0.75 within 1 % (3 standard errors).
  std::vector<sim::length_component> mix{{1.0, {5, 8, 1, 10}, {5, 8, 1, 10}},
                                         {3.0, {1500, 1800, 1000, 2000}, {20, 30, 11, 40}}};
  sim::rng gen(3);
  int small = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const auto r = sim::draw_lengths(mix, gen);
    const bool s = r.context_tokens <= 10;
    BOOST_TEST_REQUIRE((s ? r.generated_tokens <= 10 : r.generated_tokens > 10));
    small += s ? 1 : 0;
  }
  BOOST_TEST(small / double(n) == 0.25, tt::tolerance(0.04));
}

BOOST_AUTO_TEST_CASE(gamma_gaps_have_mean_one_over_rate_and_the_stated_cv) {
  // Standard error of the mean gap is cv / sqrt(n): 0.16 % (CV 1), 0.63 % (CV 4) and 2.1 %
  // (CV 13) at n = 400,000; the tolerances are about three of them. The sample CV of a gamma
  // with shape 1/169 converges slowly (its kurtosis is 6 x 169), hence 25 % there.
  struct cs {
    const char* kind;
    double cv, mean_tol, cv_tol;
  };
  for (const auto& c : {cs{"poisson", 1, 0.005, 0.01}, cs{"gamma", 4, 0.02, 0.05}, cs{"gamma", 13, 0.07, 0.25}}) {
    sim::arrival_spec a{c.kind, c.cv};
    sim::rng gen(11);
    std::vector<double> g;
    for (int i = 0; i < 400000; ++i) g.push_back(sim::draw_gap(a, 5.0, gen));
    const auto m = of(g);
    BOOST_TEST(m.mean == 0.2, tt::tolerance(c.mean_tol));
    BOOST_TEST(m.cv == c.cv, tt::tolerance(c.cv_tol));
  }
}

BOOST_AUTO_TEST_CASE(workload_rows_are_deterministic_and_scaled_per_variant) {
  const auto w = sim::parse_workload(
      "name: t\nrequests: 3000\nlengths:\n  - {context: {p50: 400, p99: 2000}, generated: {p50: 160, p99: 500, min: 50, max: 500}}\n"
      "arrivals: [{kind: poisson}, {kind: gamma, cv: 4}]\n",
      "");
  BOOST_TEST(w.arrivals.size() == 2u);
  BOOST_TEST(w.arrivals[1].label() == "gamma-cv4");
  const auto a = sim::workload_rows(w, w.arrivals[0], 1), b = sim::workload_rows(w, w.arrivals[0], 1);
  BOOST_TEST(a.size() == 3000u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    BOOST_TEST_REQUIRE(a[i].t == b[i].t);
    BOOST_TEST_REQUIRE(a[i].generated_tokens == b[i].generated_tokens);
    if (i) BOOST_TEST_REQUIRE(a[i].t >= a[i - 1].t);
  }
  // Synthetic arrivals come at 1 request/s before scaling (2,999 gaps: within 6 %).
  BOOST_TEST(sim::trace_rate(a) == 1.0, tt::tolerance(0.06));
  const auto other = sim::workload_rows(w, w.arrivals[0], 2);
  BOOST_TEST(other[10].t != a[10].t);
  // A replay with fresh arrivals keeps the trace's lengths in order and its mean rate.
  const auto csv = src + "/configs/sim/traces/azure_llm_2023_code_first400.csv";
  const auto r = sim::parse_workload("name: r\ntrace: " + csv + "\narrivals: [{kind: trace}, {kind: gamma, cv: 4}]\n", "");
  const auto own = sim::workload_rows(r, r.arrivals[0], 1), fresh = sim::workload_rows(r, r.arrivals[1], 1);
  BOOST_TEST(own.size() == 400u);
  BOOST_TEST(fresh.size() == 400u);
  for (std::size_t i = 0; i < own.size(); ++i) BOOST_TEST_REQUIRE(own[i].context_tokens == fresh[i].context_tokens);
}

BOOST_AUTO_TEST_CASE(bad_workload_files_are_refused_with_the_reason) {
  const std::pair<const char*, const char*> bad[] = {
      {"lengths: [{context: {p50: 1, p99: 2}, generated: {p50: 1, p99: 2}}]\n", "'name' is required"},
      {"name: x\n", "give 'trace'"},
      {"name: x\nlenghts: []\n", "unknown key 'lenghts'"},
      {"name: x\nlengths: [{context: {p50: 10, p99: 5}, generated: {p50: 1, p99: 2}}]\n", "p50 <= p99"},
      {"name: x\nlengths: [{context: {p50: 10, p99: 50}}]\n", "generated: missing"},
      {"name: x\nlengths: [{context: {p50: 10, p99: 50}, generated: {p50: 1, p99: 2}}]\narrivals: [{kind: weibull}]\n",
       "kind must be"},
      {"name: x\nlengths: [{context: {p50: 10, p99: 50}, generated: {p50: 1, p99: 2}}]\narrivals: [{kind: trace}]\n",
       "need a 'trace'"},
      {"name: x\nlengths: [{context: {p50: 10, p99: 50}, generated: {p50: 1, p99: 2}}]\non_miss: maybe\n", "on_miss"},
      {"name: x\nrequests: -3\nlengths: [{context: {p50: 10, p99: 50}, generated: {p50: 1, p99: 2}}]\n", "requests"},
      {"name: [x\n", "bad YAML"},
  };
  for (const auto& [text, want] : bad) {
    try {
      sim::parse_workload(text, "");
      BOOST_ERROR("accepted: " << text);
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()).find(want) != std::string::npos, e.what() << " (wanted " << want << ")");
    }
  }
}

BOOST_AUTO_TEST_CASE(the_shipped_suite_parses) {
  const auto suite = sim::load_suite(src + "/configs/sim/workloads");
  std::set<std::string> names;
  std::size_t variants = 0;
  for (const auto& w : suite) {
    names.insert(w.name);
    variants += w.arrivals.size();
  }
  BOOST_TEST((names == std::set<std::string>{"azure-code", "conversation", "long-prompt", "mixed"}));
  BOOST_TEST(variants == 10u);
}

BOOST_AUTO_TEST_CASE(the_suite_runner_covers_every_combination) {
  // Two workloads (the 400-request trace sample under its own arrivals; a small synthetic one
  // under Poisson and CV-4 arrivals) on a one-node cluster, two loads, two policies, serve and
  // reject: 3 x 2 x 2 x 2 = 24 rows.
  const auto dir = temp_dir("dls_suite_test");
  std::ofstream(dir / "a.yaml") << "name: sample\ntrace: " << src
                                << "/configs/sim/traces/azure_llm_2023_code_first400.csv\n";
  std::ofstream(dir / "b.yaml") << "name: chat\nrequests: 300\nlengths:\n"
                                   "  - {context: {p50: 400, p99: 2000}, generated: {p50: 160, p99: 500, min: 50, max: 500}}\n"
                                   "arrivals: [{kind: poisson}, {kind: gamma, cv: 4}]\n";
  std::ofstream(dir / "notes.txt") << "not a workload\n";
  const auto c = sim::load_cluster(src + "/configs/sim/llada8b-h100x64.yaml");
  auto one_node = c;
  one_node.node_devices = {8};
  one_node.initial_layout = {c.initial_layout[0]};
  sim::suite_config cfg;
  cfg.loads = {0.5, 2.0};
  cfg.policies = {"static", "dilaserve"};
  cfg.on_miss = {"serve", "reject"};
  std::size_t calls = 0, last_done = 0;
  cfg.progress = [&](std::size_t done, std::size_t total, double, const std::string&) {
    ++calls;
    BOOST_TEST_REQUIRE(total == 24u);
    BOOST_TEST_REQUIRE(done >= last_done);
    last_done = done;
  };
  const auto rows = sim::run_suite(one_node, sim::load_suite(dir.string()), cfg);
  BOOST_TEST(rows.size() == 24u);
  BOOST_TEST(last_done == 24u);
  BOOST_TEST(calls >= 24u);
  std::set<std::string> labels;
  for (const auto& r : rows) {
    labels.insert(r.workload);
    BOOST_TEST(r.requests == (r.workload == "sample/trace" ? 400u : 300u));
    if (r.on_miss == "serve") BOOST_TEST(r.rejected == 0u);
    // A refusal is a miss: attainment counts at most the requests that were served.
    BOOST_TEST(r.slo_attainment <= double(r.requests - r.rejected) / double(r.requests) + 1e-12);
  }
  BOOST_TEST((labels == std::set<std::string>{"chat/gamma-cv4", "chat/poisson", "sample/trace"}));
  std::size_t refused_at_2 = 0;
  for (const auto& r : rows)
    if (r.on_miss == "reject" && r.load == 2.0) refused_at_2 += r.rejected;
  BOOST_TEST(refused_at_2 > 0u);  // twice the capacity: some requests cannot be on time
  // JSON: the sim schema plus workload, on_miss and rejected.
  const auto j = sim::results_json(rows);
  BOOST_TEST(j["results"].size() == 24u);
  for (const auto& r : j["results"]) {
    BOOST_TEST_REQUIRE(r.contains("workload"));
    BOOST_TEST_REQUIRE(r.contains("slo_attainment"));
    BOOST_TEST_REQUIRE(r.contains("rejected"));
  }
  const auto table = sim::results_table(rows);
  BOOST_TEST(table.find("chat/gamma-cv4") != std::string::npos);
  BOOST_TEST(table.find("rej") != std::string::npos);
  // Bad settings fail before any run.
  cfg.on_miss = {"maybe"};
  BOOST_CHECK_THROW(sim::run_suite(one_node, sim::load_suite(dir.string()), cfg), std::invalid_argument);
  BOOST_CHECK_THROW(sim::load_suite((dir / "none").string()), std::runtime_error);
}
