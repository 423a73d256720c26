// The running cluster decides with the policies: `policy set` switches the policy set of a
// running cluster and names a bad one; under `deadline` an urgent request submitted after a
// batch of lax ones finishes before them (under `static`, FCFS, it finishes after them); under
// `dilaserve` tau falls in a burst and returns once it is over, a pinned tau never moves, and
// the pinned requests still give the reference answers at temperature 0; with
// `reconfigure: auto` a node splits under a burst and merges again once it is idle, under a
// policy set with reconfiguration and never under `static`.
#define BOOST_TEST_MODULE test_runtime_policy
#include <boost/test/unit_test.hpp>

#include "cluster_fixture.hpp"

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

using dls::test::cluster;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

// One node, one TP group of one device, one request per step, one token per step (quota):
// a request is 48 steps, so a batch of hundreds of lax requests keeps the group busy for
// seconds and the order of service is visible in the finish times.
const char* one_slot = R"(
nodes: [{name: node0, host: 127.0.0.1, devices: {kind: cpu, count: 1}, groups: [1]}]
engine: {gen_length: 48, block_length: 8, commit: quota, threshold: 0.9, cache: dual, refresh_interval: 4, max_batch: 1}
scheduler: {policy: deadline, quality: quality/tiny-llada.json}
)";

std::string policy_of(const cluster& c) { return c.json_cli({"status"})["policy"].get<std::string>(); }

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

// Submits `lax` requests with an hour of SLO, then, while at least half of them still wait, one
// urgent request with `urgent_slo_ms`. Returns how many lax requests certainly finished after the urgent one: a lax
// request was sent after `start`, so it finished no earlier than start + its latency; the
// urgent one finished before its client returned.
int lax_after_urgent(const cluster& c, int lax, int urgent_slo_ms) {
  auto problems = dls::test::eval_problems(static_cast<std::size_t>(lax));
  auto path = c.scratch().file("lax-" + std::to_string(urgent_slo_ms) + ".jsonl");
  {
    std::ofstream out(path);
    for (auto& p : problems) out << json{{"prompt", p.prompt}, {"slo_ms", 3600000}}.dump() << "\n";
  }
  auto start = clock_type::now();
  auto bg = c.cli_background({"submit", "--file", path, "--json", "--timeout", "120"});
  BOOST_REQUIRE(dls::test::eventually(30, [&] {
    // A status that fails is asked again: this test is about the order of service, and a poll
    // that times out on a loaded machine says nothing about it.
    auto st = c.cli({"status", "--json"});
    if (st.rc != 0) return false;
    auto j = json::parse(st.out, nullptr, false);
    return j.is_object() && j["requests"]["in_flight"].get<int>() >= lax / 2;
  }));
  auto u = c.cli({"submit", "--prompt", problems[0].prompt, "--slo-ms", std::to_string(urgent_slo_ms), "--json"});
  const double urgent_done_ms = ms_since(start);
  BOOST_REQUIRE_MESSAGE(u.rc == 0, u.err);
  BOOST_TEST(json::parse(u.out)["ok"].get<bool>());
  auto r = bg.wait();
  BOOST_REQUIRE_MESSAGE(r.rc == 0, r.err);
  int after = 0;
  double slowest = 0;
  const auto out = json::parse(r.out);
  BOOST_REQUIRE_EQUAL(out["results"].size(), static_cast<std::size_t>(lax));
  for (auto& a : out["results"]) {
    BOOST_TEST(a["ok"].get<bool>());
    after += a["latency_ms"].get<double>() > urgent_done_ms;
    slowest = std::max(slowest, a["latency_ms"].get<double>());
  }
  BOOST_TEST_MESSAGE("slowest lax " << slowest << " ms");
  BOOST_TEST_MESSAGE("lax requests finished after the urgent one: " << after << " of " << lax << " (urgent done "
                                                                     << urgent_done_ms << " ms after the lax were sent)");
  return after;
}

}  // namespace

BOOST_AUTO_TEST_CASE(policy_set_switches_the_running_cluster_and_names_a_bad_policy) {
  cluster c("local.yaml");
  BOOST_TEST(policy_of(c) == "static");
  auto r = c.cli({"policy", "set", "dilaserve"});
  BOOST_REQUIRE_MESSAGE(r.rc == 0, r.err);
  BOOST_TEST(r.out.find("static -> dilaserve") != std::string::npos, r.out);
  BOOST_TEST(policy_of(c) == "dilaserve");
  // Every group reports the policy it decides with.
  BOOST_TEST(dls::test::eventually(10, [&] {
    const auto st = c.json_cli({"status"});
    for (auto& g : st["groups"])
      if (g.value("policy", "") != "dilaserve") return false;
    return true;
  }));
  auto bad = c.cli({"policy", "set", "fastest"});
  BOOST_TEST(bad.rc != 0);
  BOOST_TEST(bad.err.find("unknown policy 'fastest'") != std::string::npos, bad.err);
  BOOST_TEST(std::count(bad.err.begin(), bad.err.end(), '\n') == 1);
  BOOST_TEST(policy_of(c) == "dilaserve");
  // The cluster still answers under the new policy.
  auto a = c.cli({"submit", "--prompt", dls::test::eval_problems(1)[0].prompt, "--json"});
  BOOST_REQUIRE_MESSAGE(a.rc == 0, a.err);
  BOOST_TEST(json::parse(a.out)["ok"].get<bool>());
}

BOOST_AUTO_TEST_CASE(an_urgent_request_overtakes_lax_ones_under_deadline_not_under_static) {
  cluster c("local.yaml", 0, one_slot);
  BOOST_TEST(policy_of(c) == "deadline");
  constexpr int lax = 600;
  // Under deadline the urgent request steps first from its admission on: most lax requests
  // still waiting then finish after it.
  BOOST_TEST(lax_after_urgent(c, lax, 20000) >= lax / 4);
  // Under static (first come, first served) it waits behind every lax request.
  BOOST_REQUIRE_EQUAL(c.cli({"policy", "set", "static"}).rc, 0);
  BOOST_TEST(lax_after_urgent(c, lax, 20001) == 0);
}

BOOST_AUTO_TEST_CASE(tau_falls_in_a_burst_returns_after_it_and_a_pinned_tau_never_moves) {
  cluster c("local.yaml", 0, "scheduler: {policy: dilaserve, quality: quality/tiny-llada.json}\n");
  auto problems = dls::test::eval_problems(1);
  // The SLO: five times what one request takes alone here, so a lone request meets it at the
  // reference tau and a burst of many does not.
  auto lone = [&](int slo_ms) {
    auto r = c.cli({"submit", "--prompt", problems[0].prompt, "--slo-ms", std::to_string(slo_ms), "--json"});
    BOOST_REQUIRE_MESSAGE(r.rc == 0, r.err);
    return json::parse(r.out);
  };
  auto first = lone(60000);
  BOOST_TEST(first["threshold"].get<double>() == 0.9);
  const int slo_ms = std::max(20, static_cast<int>(5 * first["latency_ms"].get<double>()));

  constexpr int burst = 160;
  auto all = dls::test::eval_problems(burst);
  std::vector<dls::test::problem> pinned;
  auto path = c.scratch().file("burst.jsonl");
  {
    std::ofstream out(path);
    for (int i = 0; i < burst; ++i) {
      json j{{"prompt", all[static_cast<std::size_t>(i)].prompt}, {"slo_ms", slo_ms}};
      if (i % 4 == 0) {
        j["threshold"] = 0.9;  // pinned at the config's tau
        pinned.push_back(all[static_cast<std::size_t>(i)]);
      }
      out << j.dump() << "\n";
    }
  }
  auto r = c.cli({"submit", "--file", path, "--json", "--timeout", "120"});
  BOOST_REQUIRE_MESSAGE(r.rc == 0, r.err);
  auto results = json::parse(r.out)["results"];
  BOOST_REQUIRE_EQUAL(results.size(), static_cast<std::size_t>(burst));
  auto expected = dls::test::reference_answers("local.yaml", pinned);
  int lowered = 0, pinned_same = 0;
  std::size_t k = 0;
  for (int i = 0; i < burst; ++i) {
    auto& a = results[static_cast<std::size_t>(i)];
    BOOST_TEST(a["ok"].get<bool>());
    if (i % 4 == 0) {
      BOOST_TEST(a["threshold"].get<double>() == 0.9);
      pinned_same += a["text"] == expected[k++];
    } else {
      lowered += a["threshold"].get<double>() < 0.9;
    }
  }
  BOOST_TEST_MESSAGE("burst of " << burst << " at SLO " << slo_ms << " ms: " << lowered
                                 << " unpinned requests ended below tau 0.9");
  BOOST_TEST(lowered > 0);
  // At temperature 0 a pinned request decodes as the reference does (batching may flip a rare
  // near-tie, as in test_runtime_cluster).
  BOOST_TEST(pinned_same >= static_cast<int>(pinned.size()) * 9 / 10);
  // Once the burst is over a lone request runs at the reference tau again: no cap lingers past
  // the forecast's window (scheduler.cap_forecast_ms, 2 s of the group's arrivals), within
  // which the cap may still predict the burst's rate. Its SLO is a minute, as the first one's,
  // so that only the cap could lower it: ten times the burst's SLO (tens of ms) was once too
  // little for its own slack on a machine with two more busy processes than cores.
  double tau_after = 0;
  BOOST_TEST(dls::test::eventually(20, [&] {
    tau_after = lone(60000)["threshold"].get<double>();
    return tau_after == 0.9;
  }), "tau after the burst " << tau_after);
  // The requests show their policy state while they run.
  auto rows = c.json_cli({"actors", "--kind", "request"});
  BOOST_REQUIRE(!rows.empty());
  for (auto& row : rows) {
    BOOST_TEST(row["details"].contains("tau"));
    BOOST_TEST(row["details"].contains("deadline_ms"));
    BOOST_TEST(row["details"].contains("slack_ms"));
    BOOST_TEST(row["details"].contains("next_step"));
  }
}

// A group sends no message per request for its policy state: the notes ride its load reports,
// which go out at the latest one report interval after a note. A request held mid-run (its
// group takes no more steps once it sent a snapshot, so no later report would carry them)
// still shows its tau, deadline, slack and next step while it runs.
BOOST_AUTO_TEST_CASE(a_running_request_shows_its_policy_state_without_further_steps) {
  dls::test::scoped_env hold("DILASERVE_HOLD_AFTER_SNAPSHOT", "node0");
  cluster c("local.yaml", 0, "scheduler: {policy: dilaserve, quality: quality/tiny-llada.json}\n");
  auto problems = dls::test::eval_problems(1, 9);
  BOOST_REQUIRE_EQUAL(problems.size(), 1u);
  // Four blocks of 8 at tau 1 (one token per step): its first snapshot comes after step 8,
  // with most of its answer still to decode.
  auto submit = c.cli_background({"submit", "--prompt", problems[0].prompt, "--gen-length", "32", "--threshold",
                                  "1", "--slo-ms", "60000", "--json", "--timeout", "120"});
  json shown;
  BOOST_REQUIRE(dls::test::eventually(30, [&] {
    for (auto& row : c.json_cli({"actors", "--kind", "request"}))
      if (row["details"].value("status", "") == "RUNNING" && row["details"].contains("next_step")) {
        shown = row["details"];
        return true;
      }
    return false;
  }));
  BOOST_TEST_MESSAGE("held request: " << shown.dump());
  BOOST_TEST(shown.value("tau", 0.0) == 1.0);  // pinned
  BOOST_TEST(std::abs(shown.value("deadline_ms", 0.0) - 60000.0) < 1.0);
  BOOST_TEST(shown.contains("slack_ms"));
  auto live = c.json_cli({"status"})["requests"]["live"];
  BOOST_REQUIRE_EQUAL(live.size(), 1u);
  BOOST_TEST(live[0].contains("next_step"));
  BOOST_TEST(live[0].value("tau", 0.0) == 1.0);
}

BOOST_AUTO_TEST_CASE(a_node_splits_under_a_burst_and_merges_when_idle) {
  // A hand-written profile in which one TP 2 group is the faster for a lone request and two
  // TP 1 groups serve more requests per second, so the optimizer's layout depends on the load.
  dls::test::scratch_dir files;
  const auto profile = dls::test::write_two_degree_profile(files, 0.0005);
  cluster c("local.yaml", 0,
            "scheduler: {policy: static, quality: quality/tiny-llada.json, profile: " + profile +
                "}\nreconfigure: {mode: auto, interval_ms: 200, min_dwell_ms: 500, window_ms: 1000, "
                "regroup_ms: 0}\n");
  // The TP degrees of the live groups; empty when the head, busy with the burst, did not
  // answer in time (the polls below then look again).
  auto degrees = [&] {
    std::multiset<int> d;
    try {
      const auto st = c.json_cli({"status"});
      for (auto& g : st["groups"]) d.insert(g["degree"].get<int>());
    } catch (const std::exception&) {
      d.clear();
    }
    return d;
  };
  BOOST_TEST((degrees() == std::multiset<int>{2}));
  // The burst: every eval problem of 48 answer tokens, three times over, at once.
  std::vector<dls::test::problem> burst;
  for (auto& p : dls::test::eval_problems(800))
    if (p.gen_length == 48) burst.push_back(p);
  const auto one = burst.size();
  const auto first = burst;
  for (int k = 0; k < 2; ++k) burst.insert(burst.end(), first.begin(), first.end());
  auto prompts = dls::test::write_prompts(c.scratch(), burst);
  // Under `static` (fixed TP, as in the simulator) the same burst regroups nothing: the
  // reconfigurer looks at the load and leaves the layout to the policy set.
  {
    auto r = c.cli({"submit", "--file", prompts, "--json", "--timeout", "120"});
    BOOST_REQUIRE_MESSAGE(r.rc == 0, r.err + r.out);
    const auto st = c.json_cli({"status"});
    BOOST_TEST(st["reconfigurer"]["decisions"].empty(), st["reconfigurer"].dump());
    BOOST_TEST(st["reconfigurer"].value("policy", "") == "static");
    BOOST_TEST(!st["reconfigurer"].value("policy_reconfigures", true));
    BOOST_TEST((degrees() == std::multiset<int>{2}));
  }
  // FCFS at the reference tau with reconfiguration: the answers stay the reference's.
  BOOST_REQUIRE_EQUAL(c.cli({"policy", "set", "reconfig-only"}).rc, 0);
  auto bg = c.cli_background({"submit", "--file", prompts, "--json", "--timeout", "120"});
  // The split shows in the reconfigurer's decision log (a poll of the live layout can miss it:
  // the head answers status late while it is busy with the burst, and the burst may be over
  // and merged back by then).
  auto split_logged = [&] {
    try {
      const auto st = c.json_cli({"status"});
      for (const auto& d : st["reconfigurer"]["decisions"])
        if (d.value("to", json()) == json::array({1, 1}) && d.value("ok", false)) return true;
    } catch (const std::exception&) {
    }
    return false;
  };
  BOOST_TEST(dls::test::eventually(60, split_logged));
  auto r = bg.wait();
  BOOST_REQUIRE_MESSAGE(r.rc == 0, r.err + r.out);
  // Moved at refresh boundaries, at the reference tau: the answers are the reference's.
  const auto out = json::parse(r.out);
  auto expected = dls::test::reference_answers("local.yaml", first);
  int same = 0;
  for (std::size_t i = 0; i < burst.size(); ++i) {
    BOOST_TEST(out["results"][i]["ok"].get<bool>());
    same += out["results"][i]["text"] == expected[i % one];
  }
  BOOST_TEST(same >= static_cast<int>(burst.size()) * 9 / 10);
  // Idle again: back to one TP 2 group, and status lists both decisions with their reasons.
  BOOST_TEST(dls::test::eventually(30, [&] { return degrees() == std::multiset<int>{2}; }));
  const auto st = c.json_cli({"status"});
  const auto& decisions = st["reconfigurer"]["decisions"];
  BOOST_REQUIRE_GE(decisions.size(), 2u);
  const auto& split = decisions[decisions.size() - 2];
  const auto& merge = decisions[decisions.size() - 1];
  BOOST_TEST((split["to"] == json::array({1, 1})));
  BOOST_TEST(split["ok"].get<bool>());
  BOOST_TEST(split["forecast_rps"].get<double>() > merge["forecast_rps"].get<double>());
  BOOST_TEST((merge["to"] == json::array({2})));
  BOOST_TEST(merge["ok"].get<bool>());
  BOOST_TEST(merge.contains("predicted_latency_s"));
  BOOST_TEST(st["reconfigurer"].value("policy", "") == "reconfig-only");
  BOOST_TEST(st["reconfigurer"].value("policy_reconfigures", false));
}

// Two nodes that both want to split under a burst, with reconfigure.max_fraction letting all
// of them drain at once: one automatic look starts both regroups (one wave), as the simulator
// drains up to that share of its nodes.
BOOST_AUTO_TEST_CASE(nodes_drain_together_up_to_the_configured_share) {
  dls::test::scratch_dir files;
  const auto profile = dls::test::write_two_degree_profile(files, 0.0005);
  cluster c("local-2node.yaml", 0,
            "nodes: [{name: node0, host: 127.0.0.1, devices: {kind: cpu, count: 2}, groups: [2]},"
            " {name: node1, host: 127.0.0.1, devices: {kind: cpu, count: 2}, groups: [2]}]\n"
            "scheduler: {policy: reconfig-only, quality: quality/tiny-llada.json, profile: " + profile +
                "}\nreconfigure: {mode: auto, interval_ms: 200, min_dwell_ms: 60000, window_ms: 1000, "
                "regroup_ms: 0, max_fraction: 1.0}\n");
  std::vector<dls::test::problem> burst;
  for (auto& p : dls::test::eval_problems(800))
    if (p.gen_length == 48) burst.push_back(p);
  const auto first = burst;
  for (int k = 0; k < 2; ++k) burst.insert(burst.end(), first.begin(), first.end());
  auto prompts = dls::test::write_prompts(c.scratch(), burst);
  auto bg = c.cli_background({"submit", "--file", prompts, "--json", "--timeout", "120"});
  // Both splits logged, from one look at the load.
  auto splits = [&] {
    std::map<std::string, json> by_node;
    try {
      const auto st = c.json_cli({"status"});
      for (const auto& d : st["reconfigurer"]["decisions"])
        if (d.value("to", json()) == json::array({1, 1}) && d.value("ok", false)) by_node[d.value("node", "")] = d;
    } catch (const std::exception&) {
    }
    return by_node;
  };
  BOOST_TEST(dls::test::eventually(60, [&] { return splits().size() == 2; }));
  const auto s = splits();
  BOOST_REQUIRE_EQUAL(s.size(), 2u);
  BOOST_TEST(s.at("node0")["wave"] == s.at("node1")["wave"]);
  auto r = bg.wait();
  BOOST_REQUIRE_MESSAGE(r.rc == 0, r.err + r.out);
  for (const auto& res : json::parse(r.out)["results"]) BOOST_TEST(res["ok"].get<bool>());
  // Provisioning from a quiet history merges both back, in one wave too.
  const auto quiet = files.file("quiet.csv");
  std::ofstream(quiet) << "TIMESTAMP,ContextTokens,GeneratedTokens\n0,16,48\n10,16,48\n20,16,48\n";
  auto merged = c.json_cli({"provision", "--history", quiet});
  BOOST_TEST(merged["regrouped"].size() == 2u, merged.dump());
  const auto st = c.json_cli({"status"});
  const auto& d = st["reconfigurer"]["decisions"];
  BOOST_REQUIRE_GE(d.size(), 2u);
  const auto& a = d[d.size() - 2];
  const auto& b = d[d.size() - 1];
  BOOST_TEST((a["to"] == json::array({2}) && b["to"] == json::array({2})));
  BOOST_TEST(a["wave"] == b["wave"]);
  BOOST_TEST(a["wave"].get<int>() > s.at("node0")["wave"].get<int>());
}

BOOST_AUTO_TEST_CASE(provision_plans_the_layout_from_a_history_and_regroups_to_it) {
  // The same hand-written profile: one TP 2 group is the faster for a lone request, two TP 1
  // groups serve more requests per second. A quiet history keeps the node whole, a busy one
  // splits it, whatever the policy set and with the reconfigurer in manual mode.
  dls::test::scratch_dir files;
  const auto profile = dls::test::write_two_degree_profile(files, 0.0005);
  cluster c("local.yaml", 0,
            "scheduler: {policy: static, quality: quality/tiny-llada.json, profile: " + profile +
                "}\nreconfigure: {mode: manual, regroup_ms: 0}\n");
  auto degrees = [&] {
    std::multiset<int> d;
    const auto st = c.json_cli({"status"});
    for (auto& g : st["groups"]) d.insert(g["degree"].get<int>());
    return d;
  };
  BOOST_REQUIRE((degrees() == std::multiset<int>{2}));
  auto history = [&](const std::string& name, int n, double span_s) {
    const auto path = files.file(name);
    std::ofstream out(path);
    out << "TIMESTAMP,ContextTokens,GeneratedTokens\n";
    for (int i = 0; i < n; ++i) out << span_s * i / std::max(1, n - 1) << ",16,48\n";
    return path;
  };
  auto busy = c.cli({"provision", "--history", history("busy.csv", 4000, 1.0), "--json"});
  BOOST_REQUIRE_MESSAGE(busy.rc == 0, busy.err + busy.out);
  auto j = json::parse(busy.out);
  BOOST_TEST(j["ok"].get<bool>());
  BOOST_TEST((j["layout"]["node0"] == json::array({1, 1})), j.dump());
  BOOST_TEST((j["regrouped"] == json::array({"node0"})));
  BOOST_TEST(j["provisioned_from"].get<int>() == 4000);
  BOOST_TEST((degrees() == std::multiset<int>{1, 1}));
  // The decision is listed with its reason, as the automatic ones are; its deadlines count the
  // path overhead that the head measured at startup, as the groups' deadlines do.
  const auto st = c.json_cli({"status"});
  BOOST_TEST(st["slo_request_overhead_ms"].get<double>() > 0.0);
  BOOST_TEST(j["request_overhead_ms"].get<double>() == st["slo_request_overhead_ms"].get<double>(),
             boost::test_tools::tolerance(1e-9));
  const auto& last = st["reconfigurer"]["decisions"].back();
  BOOST_TEST(last["provisioned_from"].get<int>() == 4000);
  BOOST_TEST((last["to"] == json::array({1, 1})));
  BOOST_TEST(last["ok"].get<bool>());
  // The same history again: nothing to regroup.
  auto again = c.json_cli({"provision", "--history", history("busy.csv", 4000, 1.0)});
  BOOST_TEST(again["regrouped"].empty());
  // A quiet history merges the node back; requests are still served.
  auto quiet = c.json_cli({"provision", "--history", history("quiet.csv", 3, 20.0)});
  BOOST_TEST((quiet["layout"]["node0"] == json::array({2})), quiet.dump());
  BOOST_TEST((degrees() == std::multiset<int>{2}));
  auto p = dls::test::eval_problems(1);
  auto r = c.cli({"submit", "--prompt", p[0].prompt, "--json"});
  BOOST_REQUIRE_MESSAGE(r.rc == 0, r.err);
  BOOST_TEST(json::parse(r.out)["ok"].get<bool>());
  // Bad histories get one line naming the problem, and change nothing.
  const auto empty = files.file("empty.csv");
  std::ofstream(empty) << "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  auto e = c.cli({"provision", "--history", empty});
  BOOST_TEST(e.rc != 0);
  BOOST_TEST(e.err.find("empty.csv") != std::string::npos, e.err);
  const auto bad = files.file("bad.csv");
  std::ofstream(bad) << "TIMESTAMP,ContextTokens,GeneratedTokens\n0,16,48\n1,sixteen,48\n";
  auto b = c.cli({"provision", "--history", bad});
  BOOST_TEST(b.rc != 0);
  BOOST_TEST(b.err.find("bad.csv") != std::string::npos, b.err);
  BOOST_TEST(std::count(b.err.begin(), b.err.end(), '\n') <= 1, b.err);
  BOOST_TEST((degrees() == std::multiset<int>{2}));
}

// A request's SLO counts what a lone request spends outside the engine (docs/runtime.md,
// "Deadlines"): the head times lone probes once every node has joined, before `up` returns, and
// a deadline adds slo_scale x that figure to the profiled solo latency; a figure the cluster file
// gives is used as it is. On one profile, the same prompt's windows under the two differ by
// slo_scale x the difference of the figures (up to the groups' idle per-step overheads, which
// each cluster times for itself).
BOOST_AUTO_TEST_CASE(deadlines_count_the_path_overhead_measured_at_startup_or_fixed_in_the_file) {
  dls::test::scratch_dir dir;
  const auto profile = dls::test::write_two_degree_profile(dir, 0.001);
  const auto prompt = dls::test::eval_problems(1)[0].prompt;
  auto setup = [&](const std::string& overhead) {
    return "nodes: [{name: node0, host: 127.0.0.1, devices: {kind: cpu, count: 1}, groups: [1]}]\n"
           "scheduler: {policy: static, slo_scale: 2, profile: " + profile + overhead + "}\n";
  };
  auto window_ms = [&](const cluster& c) {
    const auto a = c.json_cli({"submit", "--prompt", prompt});
    BOOST_TEST_REQUIRE(a.contains("deadline_ms"), a.dump());
    return a.at("deadline_ms").get<double>();
  };
  // The per-step overhead a group's SLOs count (ms), timed by each cluster at its start.
  auto step_overhead_ms = [](const json& st) {
    BOOST_TEST_REQUIRE(st.at("groups").size() == 1u, st.dump());
    return 1e3 * st.at("groups")[0].at("slo_step_overhead_s").get<double>();
  };
  double measured = 0, measured_window = 0, first_step_ms = 0;
  {
    cluster c("local.yaml", 0, setup(""));
    const auto st = c.json_cli({"status"});
    BOOST_TEST_REQUIRE(st.contains("slo_request_overhead_ms"), st.dump());
    measured = st.at("slo_request_overhead_ms").get<double>();
    BOOST_TEST(measured > 0.0);
    measured_window = window_ms(c);
    BOOST_TEST(measured_window > 2 * measured);
    first_step_ms = step_overhead_ms(c.json_cli({"status"}));
  }
  cluster c("local.yaml", 0, setup(", slo_request_overhead_ms: 40"));
  BOOST_TEST(c.json_cli({"status"}).at("slo_request_overhead_ms").get<double>() == 40.0);
  const double expected = 2 * (40 - measured);
  const double got = window_ms(c) - measured_window;
  // The two clusters' per-step overheads enter each window once per predicted step: at most
  // gen_length (16 in configs/local.yaml) steps, since every step commits a token. On a quiet
  // machine they agree within a few µs; on a loaded one a start can time them milliseconds apart.
  const double step_gap = 2 * 16 * (step_overhead_ms(c.json_cli({"status"})) - first_step_ms);
  const double lo = std::min(0.0, step_gap) - 10.0, hi = std::max(0.0, step_gap) + 10.0;
  BOOST_TEST((got - expected >= lo && got - expected <= hi),
             "windows differ by " << got << " ms, expected " << expected << " + [" << lo << ", " << hi
                                  << "] for the per-step overheads");
}
