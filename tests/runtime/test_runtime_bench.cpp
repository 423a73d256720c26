// `dilaserve bench` on a cluster it starts itself: the JSON is `dilaserve sim`'s schema, the
// output folder holds CSV and SVG, and no process of the cluster is left afterwards, also when
// the bench is interrupted or refused; an interrupted overload soak likewise.
#define BOOST_TEST_MODULE test_runtime_bench
#include <boost/test/unit_test.hpp>

#include "cluster_fixture.hpp"
#include "runtime/state_dir.hpp"
#include "common/step_log.hpp"
#include "sim/trace.hpp"

#include <nlohmann/json.hpp>

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const std::string trace = std::string(DLS_SOURCE_DIR) + "/configs/sim/traces/azure_llm_2023_code_first400.csv";
constexpr double duration_s = 20;  // trace seconds: a dozen requests

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Processes whose command line mentions `needle` (the state directory: every head and node
// process of the bench's cluster has its TLS folder under it).
std::vector<std::string> processes_mentioning(const std::string& needle) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto cmd = slurp(e.path().string() + "/cmdline");
    for (char& c : cmd)
      if (c == '\0') c = ' ';
    if (cmd.find(needle) != std::string::npos && cmd.find(" bench ") == std::string::npos)
      found.push_back(name + ": " + cmd);
  }
  return found;
}

std::vector<std::string> bench_args(const std::string& config, const std::string& state, std::vector<std::string> extra) {
  std::vector<std::string> a{"bench", "--cluster", config, "--state-dir", state, "--trace", trace, "--duration",
                             std::to_string(duration_s), "--capacity-requests", "40", "--warmup", "4"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Should a check fail with the cluster still up, it is stopped anyway at the end of the case.
struct down_at_exit {
  std::string state;
  ~down_at_exit() {
    if (fs::exists(dls::runtime::state_file(state))) dls::test::run_cli({"down", "--state-dir", state});
  }
};

// The SLO window (deadline - arrival, us) of every request a decision record holds, by shape
// (prompt, answer tokens), leaving out the head's startup probes: they carry an explicit SLO of
// an hour (supervisor.cpp), so their windows are not derived from the profile.
using window_map = std::map<std::pair<int, int>, std::set<double>>;
void add_derived_windows(window_map& windows, const json& snapshot) {
  constexpr double probe_window_us = 3600e6;
  for (const char* part : {"queued", "active"})
    for (const auto& r : snapshot.at(part)) {
      const double w = std::round((r.at("deadline_s").get<double>() - r.at("arrival_s").get<double>()) * 1e6);
      if (std::abs(w - probe_window_us) > 1e3) windows[{r.at("prompt_len").get<int>(), r.at("gen_len").get<int>()}].insert(w);
    }
}

std::size_t requests_in_window() {
  std::size_t n = 0;
  for (const auto& r : dls::sim::load_azure_csv(trace)) n += r.t < duration_s;
  return n;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_bench_reports_in_the_sim_schema_and_leaves_nothing_running) {
  dls::test::scratch_dir dir;
  const auto config = dls::test::write_test_config(dir, "local.yaml");
  const auto state = dir.file("state");
  down_at_exit guard{state};
  const auto out = dir.file("out");
  const auto steps_dir = dir.file("steps");
  fs::create_directories(steps_dir);
  // The cluster's groups log every step (DILASERVE_STEP_LOG, inherited through `up`) and the
  // input of every decision (DILASERVE_DECISION_LOG).
  dls::test::scoped_env step_log("DILASERVE_STEP_LOG", steps_dir);
  const auto decisions_dir = dir.file("decisions");
  fs::create_directories(decisions_dir);
  dls::test::scoped_env decision_log("DILASERVE_DECISION_LOG", decisions_dir);
  dls::test::scoped_env decision_every("DILASERVE_DECISION_LOG_EVERY", "1");
  auto r = dls::test::run_cli(bench_args(config, state, {"--load", "0.5", "--policies", "static,deadline", "--json",
                                                         "--out", out}));
  BOOST_TEST_REQUIRE(r.rc == 0, r.err);
  const auto j = json::parse(r.out);
  BOOST_TEST_REQUIRE(j.size() == 1u);
  const auto& results = j.at("results");
  BOOST_TEST_REQUIRE(results.size() == 2u);
  const std::set<std::string> schema{"policy", "load", "slo_scale", "requests", "slo_attainment", "mean_latency_s",
                                     "p50_latency_s", "p90_latency_s", "p99_latency_s", "accuracy",
                                     "tokens_per_step", "migrations", "reconfigurations"};
  const auto expected = requests_in_window();
  BOOST_TEST_REQUIRE(expected > 0u);
  std::vector<std::string> policies;
  for (const auto& row : results) {
    std::set<std::string> keys;
    for (const auto& [k, v] : row.items()) keys.insert(k);
    BOOST_TEST((keys == schema), row.dump());
    policies.push_back(row.at("policy").get<std::string>());
    BOOST_TEST(row.at("load").get<double>() == 0.5);
    BOOST_TEST(row.at("slo_scale").get<double>() == 2.0);  // configs/local.yaml's scheduler default
    BOOST_TEST(row.at("requests").get<std::size_t>() == expected);
    for (const char* f : {"slo_attainment", "accuracy"}) {
      BOOST_TEST(row.at(f).get<double>() >= 0.0);
      BOOST_TEST(row.at(f).get<double>() <= 1.0);
    }
    // Every request was answered, from the eval set, by the trained model.
    BOOST_TEST(row.at("accuracy").get<double>() > 0.5, row.dump());
    BOOST_TEST(row.at("mean_latency_s").get<double>() > 0.0);
    BOOST_TEST(row.at("p50_latency_s").get<double>() <= row.at("p99_latency_s").get<double>());
    BOOST_TEST(row.at("tokens_per_step").get<double>() >= 1.0);
  }
  BOOST_TEST((policies == std::vector<std::string>{"static", "deadline"}));
  for (const char* f : {"results.csv", "results.json", "client.csv", "attainment_s2.svg", "latency_s2.svg"})
    BOOST_TEST(fs::exists(out + "/" + f), f);
  BOOST_TEST(slurp(out + "/results.csv").find("\nstatic,0.5,2,") != std::string::npos);
  // Every request of both runs, in arrival order, answered, with the steps it took.
  {
    std::ifstream csv(out + "/requests.csv");
    std::string line;
    std::getline(csv, line);
    BOOST_TEST(line == "policy,load,slo_scale,index,arrival_s,latency_s,steps,slo_met");
    std::map<std::string, std::size_t> rows;
    double last_arrival = -1;
    while (std::getline(csv, line)) {
      std::vector<std::string> f;
      std::stringstream ss(line);
      for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
      BOOST_TEST_REQUIRE(f.size() == 8u, line);
      const auto index = std::stoul(f[3]);
      BOOST_TEST(index == rows[f[0]]++, line);
      const double arrival = std::stod(f[4]);
      if (index > 0) BOOST_TEST(arrival >= last_arrival, line);
      last_arrival = arrival;
      BOOST_TEST(std::stod(f[5]) > 0.0, line);
      BOOST_TEST(std::stoi(f[6]) >= 1, line);
    }
    BOOST_TEST(rows["static"] == expected);
    BOOST_TEST(rows["deadline"] == expected);
  }
  // Every group's steps, each run's between the start and end client.csv gives it.
  {
    std::vector<std::pair<double, double>> windows;
    std::ifstream clients(out + "/client.csv");
    std::string line;
    std::getline(clients, line);
    BOOST_TEST(line.find(",start_unix_s,end_unix_s") != std::string::npos, line);
    while (std::getline(clients, line)) {
      const auto end = line.rfind(','), start = line.rfind(',', end - 1);
      windows.emplace_back(std::stod(line.substr(start + 1, end - start - 1)), std::stod(line.substr(end + 1)));
    }
    BOOST_TEST_REQUIRE(windows.size() == 2u);
    std::vector<std::size_t> in_run(2, 0);
    std::size_t files = 0;
    for (const auto& e : fs::directory_iterator(steps_dir)) {
      ++files;
      std::ifstream log(e.path());
      std::getline(log, line);
      BOOST_TEST(line == dls::step_log::header());
      while (std::getline(log, line)) {
        std::vector<std::string> f;
        std::stringstream ss(line);
        for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
        BOOST_TEST_REQUIRE(f.size() == 12u, line);
        BOOST_TEST(std::stoi(f[5]) >= 1, line);                   // a step holds a request
        BOOST_TEST(std::stod(f[2]) >= std::stod(f[3]), line);     // its wall time holds the engine's
        const double t = std::stod(f[1]);
        for (std::size_t w = 0; w < windows.size(); ++w) in_run[w] += t >= windows[w].first && t <= windows[w].second;
      }
    }
    BOOST_TEST(files == 1u);  // local.yaml: one group
    BOOST_TEST(in_run[0] > 0u);
    BOOST_TEST(in_run[1] > 0u);
  }
  // A deadline is fixed on arrival from the profile and the group's idle per-step overhead:
  // requests of one shape get the same SLO window however busy the group was when they came,
  // while the group's moving estimate of a step's overhead, which its decisions use, moved.
  {
    window_map windows;  // (prompt, answer) -> deadline - arrival
    std::set<double> overheads;
    std::size_t files = 0;
    for (const auto& e : fs::directory_iterator(decisions_dir)) {
      ++files;
      std::ifstream log(e.path());
      for (std::string line; std::getline(log, line);) {
        const auto rec = json::parse(line);
        overheads.insert(rec.at("step_overhead_s").get<double>());
        add_derived_windows(windows, rec.at("snapshot"));
      }
    }
    BOOST_TEST(files == 1u);
    BOOST_TEST(overheads.size() > 1u);
    BOOST_TEST_REQUIRE(!windows.empty());
    for (const auto& [shape, w] : windows)
      BOOST_TEST(w.size() == 1u, "prompt " << shape.first << ", answer " << shape.second << ": " << w.size()
                                           << " windows, from " << *w.begin() << " to " << *w.rbegin() << " us");
  }
  // The same requests as a trace for the simulator: each canvas whole, and the blocks its
  // decode ran before the answer ended.
  {
    const auto rows = dls::sim::load_azure_csv(out + "/arrivals.csv");
    BOOST_TEST(rows.size() == expected);
    for (const auto& r : rows) {
      BOOST_TEST(r.decoded_tokens >= 1);
      BOOST_TEST(r.decoded_tokens <= r.generated_tokens);
    }
  }
  BOOST_TEST(slurp(out + "/attainment_s2.svg").find("<polyline") != std::string::npos);
  BOOST_TEST(slurp(out + "/latency_s2.svg").find("stroke-dasharray") != std::string::npos);  // the p99 lines
  BOOST_TEST(!fs::exists(dls::runtime::state_file(state)));
  const auto left = processes_mentioning(state);
  BOOST_TEST(left.empty(), (left.empty() ? "" : left.front()));
}

BOOST_AUTO_TEST_CASE(through_the_http_api_the_schema_is_the_same) {
  dls::test::scratch_dir dir;
  const auto config = dls::test::write_test_config(dir, "local.yaml");  // has an http: section
  const auto state = dir.file("state");
  down_at_exit guard{state};
  auto r = dls::test::run_cli(bench_args(config, state, {"--http", "--load", "0.5", "--policies", "dilaserve", "--json"}));
  BOOST_TEST_REQUIRE(r.rc == 0, r.err);
  const auto results = json::parse(r.out).at("results");
  BOOST_TEST_REQUIRE(results.size() == 1u);
  const auto& row = results[0];
  BOOST_TEST(row.size() == 13u, row.dump());
  BOOST_TEST(row.at("policy") == "dilaserve");
  BOOST_TEST(row.at("requests").get<std::size_t>() == requests_in_window());
  BOOST_TEST(row.at("accuracy").get<double>() > 0.5, row.dump());
  BOOST_TEST(row.at("p99_latency_s").get<double>() > 0.0);
  BOOST_TEST(!fs::exists(dls::runtime::state_file(state)));
  BOOST_TEST(processes_mentioning(state).empty());
}

BOOST_AUTO_TEST_CASE(an_interrupted_bench_stops_its_cluster) {
  dls::test::scratch_dir dir;
  const auto config = dls::test::write_test_config(dir, "local.yaml");
  const auto state = dir.file("state");
  down_at_exit guard{state};
  // Enough work that the interrupt lands while the bench runs.
  dls::test::background_cli bench(bench_args(config, state, {"--load", "0.2,0.3", "--policies", "static,deadline"}));
  const bool up = dls::test::eventually(120, [&] {
    return slurp(state + "/bench-up.log").find("is up") != std::string::npos;
  });
  BOOST_TEST_REQUIRE(up, slurp(state + "/bench-up.log"));
  bench.signal(SIGINT);
  auto r = bench.wait();
  BOOST_TEST(r.rc == 1, r.err);
  BOOST_TEST(r.err.find("interrupted") != std::string::npos, r.err);
  BOOST_TEST(!fs::exists(dls::runtime::state_file(state)));
  const auto left = processes_mentioning(state);
  BOOST_TEST(left.empty(), (left.empty() ? "" : left.front()));
}

// The overload soak runs for half an hour by default; Ctrl-C must leave a report of what it
// measured and no cluster behind.
BOOST_AUTO_TEST_CASE(an_interrupted_soak_stops_its_cluster_and_writes_its_figures) {
  dls::test::scratch_dir dir;
  const auto config = dls::test::write_test_config(dir, "local.yaml");
  const auto out = dir.file("soak");
  const auto state = out + "/state";
  down_at_exit guard{state};
  dls::test::background_cli soak({"bench-soak", "--config", config, "--duration", "600", "--out", out,
                                  "--capacity-requests", "40", "--sample-s", "0.5"});
  // The sampler's second row: the cluster is up, its capacity measured, and the load running.
  const bool loading = dls::test::eventually(180, [&] {
    const auto csv = slurp(out + "/samples.csv");
    return std::count(csv.begin(), csv.end(), '\n') >= 3;
  });
  BOOST_TEST_REQUIRE(loading, slurp(out + "/samples.csv"));
  soak.signal(SIGINT);
  auto r = soak.wait();
  BOOST_TEST(r.rc == 130, r.err + r.out);
  BOOST_TEST(r.out.find("interrupted after") != std::string::npos, r.out);
  const auto summary = json::parse(slurp(out + "/summary.json"));
  BOOST_TEST(summary.at("interrupted").get<bool>());
  BOOST_TEST(summary.at("offered").get<uint64_t>() > 0u);
  BOOST_TEST(summary.contains("unanswered_when_interrupted"));
  BOOST_TEST(!summary.contains("lost"), summary.dump());
  BOOST_TEST(summary.at("other_errors").get<uint64_t>() == 0u, summary.dump());
  BOOST_TEST(!fs::exists(dls::runtime::state_file(state)));
  const auto left = processes_mentioning(state);
  BOOST_TEST(left.empty(), (left.empty() ? "" : left.front()));
}

BOOST_AUTO_TEST_CASE(bad_input_is_refused_before_a_cluster_starts) {
  dls::test::scratch_dir dir;
  const auto config = dls::test::write_test_config(dir, "local.yaml");
  const auto state = dir.file("state");
  down_at_exit guard{state};
  auto r = dls::test::run_cli(bench_args(config, state, {"--policies", "static,bogus"}));
  BOOST_TEST(r.rc == 1);
  BOOST_TEST(r.err.find("unknown policy 'bogus'") != std::string::npos, r.err);
  r = dls::test::run_cli(bench_args(config, state, {"--address", "127.0.0.1:1"}));
  BOOST_TEST(r.rc == 1);
  BOOST_TEST(r.err.find("not both") != std::string::npos, r.err);
  r = dls::test::run_cli({"bench", "--cluster", config, "--state-dir", state, "--trace", trace, "--duration", "0"});
  BOOST_TEST(r.rc == 2);
  BOOST_TEST(r.err.find("--duration: must be > 0") != std::string::npos, r.err);
  BOOST_TEST(!fs::exists(state));
}

// local.yaml with a hand-written profile in which a TP 2 step is slow (so the optimizer plans
// two TP 1 groups for node0 as soon as it has arrivals to plan for) and `reconfigure` as given.
std::string slow_tp2_config(const dls::test::scratch_dir& dir, const std::string& reconfigure) {
  const auto profile = dls::test::write_two_degree_profile(dir, 0.05);
  return dls::test::write_test_config(dir, "local.yaml", 0,
                                      "scheduler: {policy: static, quality: quality/tiny-llada.json, profile: " +
                                          profile + "}\nreconfigure: " + reconfigure + "\n");
}

// A bench of a reconfiguring set, then `static`, at twice a fixed capacity.
std::vector<std::string> reconfiguring_bench(const std::string& config, const std::string& state,
                                             const std::vector<std::string>& extra) {
  std::vector<std::string> a{"bench", "--cluster", config, "--state-dir", state, "--trace", trace, "--duration", "300",
                             "--capacity", "200", "--load", "2", "--warmup", "4", "--policies", "reconfig-only,static",
                             "--json"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// A policy set that reconfigures may leave a node regrouped at the end of its run; the bench
// puts it back before the next policy's run, so that every run starts from the same groups.
BOOST_AUTO_TEST_CASE(a_regroup_in_one_run_is_undone_before_the_next) {
  dls::test::scratch_dir dir;
  // A hand-written profile in which a TP 2 step is slow, so the optimizer splits the node as
  // soon as it has seen arrivals; the dwell keeps it split until the bench puts it back.
  const auto config = slow_tp2_config(dir, "{mode: auto, interval_ms: 200, min_dwell_ms: 600000, window_ms: 1000, regroup_ms: 0}");
  const auto state = dir.file("state");
  down_at_exit guard{state};
  const auto decisions_dir = dir.file("decisions");
  fs::create_directories(decisions_dir);
  dls::test::scoped_env decision_log("DILASERVE_DECISION_LOG", decisions_dir);
  dls::test::scoped_env decision_every("DILASERVE_DECISION_LOG_EVERY", "1");
  // From the file's layout (no --provision): the reconfigurer splits the node during the run.
  auto r = dls::test::run_cli(reconfiguring_bench(config, state, {}));
  BOOST_TEST_REQUIRE(r.rc == 0, r.err);
  BOOST_TEST(r.err.find("provisioned") == std::string::npos, r.err);
  const auto results = json::parse(r.out).at("results");
  BOOST_TEST_REQUIRE(results.size() == 2u);
  BOOST_TEST(results[0].at("policy") == "reconfig-only");
  BOOST_TEST(results[0].at("reconfigurations").get<int>() >= 1, results[0].dump());
  // The split was undone before `static` ran, and `static` regrouped nothing itself.
  BOOST_TEST(r.err.find("bench: node node0 put back to groups 2 (was 1,1) before static") != std::string::npos, r.err);
  BOOST_TEST(results[1].at("reconfigurations").get<int>() == 0, results[1].dump());
  // The TP-2 group that put the node back counts the idle overhead its node's first TP-2 group
  // timed at boot (slo_overhead_book.hpp), so a request's SLO window does not depend on which of
  // them it reached; each TP-2 group logs decisions, the one formed after the run too.
  window_map windows;  // (prompt, answer) -> deadline - arrival
  std::set<std::string> tp2_groups;
  for (const auto& e : fs::directory_iterator(decisions_dir)) {
    std::ifstream log(e.path());
    for (std::string line; std::getline(log, line);) {
      const auto rec = json::parse(line);
      if (rec.at("snapshot").at("group").at("tp").get<int>() != 2) continue;
      tp2_groups.insert(rec.at("group").get<std::string>());
      add_derived_windows(windows, rec.at("snapshot"));
    }
  }
  BOOST_TEST(tp2_groups.size() == 2u);
  for (const auto& [shape, w] : windows)
    BOOST_TEST(w.size() == 1u, "prompt " << shape.first << ", answer " << shape.second << ": " << w.size()
                                         << " windows, from " << *w.begin() << " to " << *w.rbegin() << " us");
}

// With --provision a policy set that reconfigures starts its run in the layout `provision` plans
// from the run's arrivals (as the simulator boots it); the next policy's run starts from the file's.
BOOST_AUTO_TEST_CASE(a_reconfiguring_policy_starts_in_the_layout_provisioned_for_its_run) {
  dls::test::scratch_dir dir;
  const auto config = slow_tp2_config(dir, "{mode: manual, regroup_ms: 0}");  // the plan: two TP 1 groups
  const auto state = dir.file("state");
  down_at_exit guard{state};
  auto r = dls::test::run_cli(reconfiguring_bench(config, state, {"--provision"}));
  BOOST_TEST_REQUIRE(r.rc == 0, r.err);
  BOOST_TEST(r.err.find("bench: node node0 provisioned for reconfig-only at load 2.00") != std::string::npos, r.err);
  BOOST_TEST(r.err.find("bench: node node0 put back to groups 2 (was 1,1) before static") != std::string::npos, r.err);
  const auto results = json::parse(r.out).at("results");
  BOOST_TEST_REQUIRE(results.size() == 2u);
  BOOST_TEST(results[0].at("requests").get<int>() == results[1].at("requests").get<int>());
}
