// Bad command lines get one line on stderr naming the problem and exit code 2 (parse errors)
// or 1 (bad input found while running), through the real `dilaserve` binary.
#define BOOST_TEST_MODULE test_runtime_cli
#include <boost/test/unit_test.hpp>

#include "cluster_fixture.hpp"
#include "policies/step_cost.hpp"

#include <yaml-cpp/yaml.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
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
  // Absurd sizes are refused before any memory is taken, by each simulator command.
  expect_one_line_error({"sim", "--cluster", sim_cluster, "--synthetic", "poisson", "--requests", "100000000000"}, 2,
                        "--requests: must be at most 20000000");
  expect_one_line_error({"sim-suite", "--cluster", sim_cluster, "--requests", "30000000"}, 2,
                        "--requests: must be at most 20000000");
  expect_one_line_error({"sim-bound", "--cluster", sim_cluster, "--synthetic", "poisson", "--requests", "20000001"}, 2,
                        "--requests: must be at most 20000000");
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

// `sim-suite --sweep KEY` runs the suite with the file as it is and with KEY scaled by each
// factor, one result file each, the scaled value in the rows' behaviour (here max_active 64 ->
// 32 and 96, integers stay integers); a key the file does not set is refused in one line.
BOOST_AUTO_TEST_CASE(sim_suite_sweeps_a_cluster_file_key) {
  dls::test::scratch_dir dir;
  const std::vector<std::string> base{"sim-suite", "--cluster", sim_cluster, "--suite",
                                      std::string(DLS_SOURCE_DIR) + "/configs/sim/workloads", "--workloads", "long-prompt", "--load", "1.0",
                                      "--requests", "200", "--policies", "dilaserve", "--on-miss", "serve"};
  auto with = [&](std::vector<std::string> extra) {
    auto a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto r = dls::test::run_cli(with({"--sweep", "scheduler.max_active", "--sweep-factors", "0.5,1.5", "--out", dir.path()}));
  BOOST_TEST_REQUIRE(r.rc == 0, r.err);
  BOOST_TEST(r.out.find("scheduler.max_active@0.5: scheduler.max_active = 32") != std::string::npos, r.out);
  BOOST_TEST(r.out.find("scheduler.max_active@1.5: scheduler.max_active = 96") != std::string::npos, r.out);
  for (const char* f : {"base", "scheduler.max_active@0.5", "scheduler.max_active@1.5"}) {
    std::ifstream in(dir.path() + "/" + f + ".json");
    BOOST_TEST_REQUIRE(in.good(), f);
    const auto j = nlohmann::json::parse(in);
    BOOST_TEST(j["results"].size() == 3u, f);  // the three arrival processes of long-prompt
  }
  expect_one_line_error(with({"--sweep", "scheduler.frob", "--out", dir.path()}), 1,
                        "--sweep: " + sim_cluster + " sets no 'scheduler.frob'");
  expect_one_line_error(with({"--sweep", "name", "--out", dir.path()}), 1, "'name' in " + sim_cluster + " is not a number");
  expect_one_line_error(with({"--sweep", "scheduler.max_active"}), 1, "--sweep needs --out DIR");
}

// `sim-bound --workload FILE` bounds every arrival variant of a suite workload, drawn and
// scaled as sim-suite draws them; the bound holds over what the simulator's policies attain on
// the same requests; --trace and --workload exclude each other, and one of them is needed.
BOOST_AUTO_TEST_CASE(sim_bound_bounds_each_variant_of_a_suite_workload) {
  const std::string wl = std::string(DLS_SOURCE_DIR) + "/configs/sim/workloads/long-prompt.yaml";
  auto r = dls::test::run_cli({"sim-bound", "--cluster", sim_cluster, "--workload", wl, "--requests", "300", "--load",
                               "1.5"});
  BOOST_TEST_REQUIRE(r.rc == 0, r.err);
  std::map<std::string, double> bound;  // variant -> upper bound (fraction)
  std::istringstream lines(r.out);
  std::string variant;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("workload ", 0) == 0) {
      variant = line.substr(9, line.find(':') - 9);
    } else if (!variant.empty() && line.find("1.50") != std::string::npos) {
      std::istringstream f(line);
      double load = 0, slo = 0, requests = 0, upper = 0;
      f >> load >> slo >> requests >> upper;
      bound[variant] = upper / 100;
    }
  }
  BOOST_TEST_REQUIRE(bound.size() == 3u, r.out);  // poisson, gamma-cv4, gamma-cv13
  dls::test::scratch_dir dir;
  auto s = dls::test::run_cli({"sim-suite", "--cluster", sim_cluster, "--suite",
                               std::string(DLS_SOURCE_DIR) + "/configs/sim/workloads", "--workloads", "long-prompt",
                               "--load", "1.5", "--requests", "300", "--policies", "static,dilaserve", "--on-miss",
                               "serve", "--out", dir.path()});
  BOOST_TEST_REQUIRE(s.rc == 0, s.err);
  std::ifstream in(dir.path() + "/results.json");
  const auto rows = nlohmann::json::parse(in)["results"];
  BOOST_TEST_REQUIRE(rows.size() == 6u);
  for (const auto& row : rows) {
    const std::string w = row["workload"].get<std::string>();
    const std::string v = w.substr(w.find('/') + 1);
    BOOST_TEST_REQUIRE(bound.count("long-prompt/" + v) == 1u, w);
    BOOST_TEST(row["slo_attainment"].get<double>() <= bound["long-prompt/" + v] + 1e-9, w);
  }
  // requests.csv: every request of every run, whose on-time share is each row's attainment.
  std::ifstream csv(dir.path() + "/requests.csv");
  std::string header;
  std::getline(csv, header);
  BOOST_TEST(header ==
             "workload,on_miss,policy,load,slo_scale,index,arrival_s,prompt_len,gen_len,slo_window_s,latency_s,"
             "queued_s,in_steps_s,alone_s,steps,slo_met,rejected");
  std::map<std::string, std::pair<int, int>> met;  // workload/policy -> (on time, requests)
  for (std::string line; std::getline(csv, line);) {
    std::vector<std::string> f;
    std::istringstream cells(line);
    for (std::string c; std::getline(cells, c, ',');) f.push_back(c);
    BOOST_TEST_REQUIRE(f.size() == 17u, line);
    auto& m = met[f[0] + "/" + f[2]];
    m.first += f[15] == "1";
    m.second += 1;
    BOOST_TEST(std::stod(f[10]) >= std::stod(f[12]) - 1e-9, line);  // latency covers its time in steps
  }
  BOOST_TEST_REQUIRE(met.size() == 6u);
  for (const auto& row : rows) {
    const auto& m = met[row["workload"].get<std::string>() + "/" + row["policy"].get<std::string>()];
    BOOST_TEST(m.second == 300);
    BOOST_TEST(static_cast<double>(m.first) / m.second == row["slo_attainment"].get<double>(),
               boost::test_tools::tolerance(1e-9));
  }
  expect_one_line_error({"sim-bound", "--cluster", sim_cluster, "--workload", wl, "--trace", wl}, 2, "excludes");
  expect_one_line_error({"sim-bound", "--cluster", sim_cluster}, 1, "give --trace FILE or --workload FILE");
  expect_one_line_error({"sim-bound", "--cluster", sim_cluster, "--workload", wl, "--rate", "5"}, 2, "excludes");
}

// `dilaserve profile` times real engine steps and writes a measured profile that the policies
// load and the simulator runs on: each sample has the rows its step kind implies, and from a
// batch of 2 up a mixed batch (half refreshing beside half reusing) is timed too.
BOOST_AUTO_TEST_CASE(profile_writes_a_measured_profile_that_the_simulator_runs_on) {
  dls::test::scratch_dir dir;
  const auto file = dir.file("cpu.yaml");
  auto r = dls::test::run_cli({"profile", "--model", dls::test::model_dir(), "--tp", "1,2", "--lengths", "16,32", "--batches", "1,2", "--reps", "2",
                               "--out", file});
  BOOST_TEST_REQUIRE(r.rc == 0, r.err);
  BOOST_TEST(r.out.find("wrote 20 samples") != std::string::npos, r.out);
  BOOST_TEST(r.out.find("tp 2: 10 samples, linear fit R^2") != std::string::npos, r.out);
  const auto root = YAML::LoadFile(file);
  BOOST_TEST(root["kind"].as<std::string>() == "measured");
  BOOST_TEST(root["source"].as<std::string>().find("--tp 1,2 --lengths 16,32 --batches 1,2 --reps 2") != std::string::npos);
  BOOST_TEST_REQUIRE(root["samples"].size() == 20u);
  int refresh = 0, mixed = 0;
  for (const auto& s : root["samples"]) {
    const int q = s["query_rows"].as<int>(), k = s["key_rows"].as<int>();
    BOOST_TEST((k == 16 || k == 32));
    const auto kind = s["kind"].as<std::string>();
    if (kind == "refresh") {
      ++refresh;
      BOOST_TEST(q == k);  // a refresh recomputes the whole canvas
    } else {
      BOOST_TEST(q == 8);  // a dual-cache reuse step: the block's rows only
    }
    if (kind == "mixed") {
      ++mixed;
      BOOST_TEST(s["batch"].as<int>() == 2);
      BOOST_TEST(s["refreshing"].as<int>() == 1);
    }
    BOOST_TEST(s["seconds"].as<double>() > 0);
  }
  BOOST_TEST(refresh == 8);
  BOOST_TEST(mixed == 4);  // batch 2 at two lengths and two degrees
  const auto model = dls::policy::load_step_cost_profile(file);
  BOOST_TEST(model.supports(1));
  BOOST_TEST(model.supports(2));
  BOOST_TEST(!model.supports(4));

  const auto cluster = dir.file("cpu-cluster.yaml");
  std::ofstream(cluster) << "name: local-cpu\nscheduler: {profile: cpu.yaml, quality: " << DLS_SOURCE_DIR
                         << "/configs/quality/tiny-llada.json}\nengine: {block_length: 8, threshold: 0.9}\nmax_canvas: 64\n"
                         << "nodes:\n  - {name: cpu, devices: {kind: cpu, count: 2}, groups: [1, 1]}\n";
  auto s = dls::test::run_cli({"sim", "--cluster", cluster, "--synthetic", "poisson", "--requests", "40", "--policies",
                               "static,dilaserve", "--json"});
  BOOST_TEST(s.rc == 0, s.err);
  BOOST_TEST(s.out.find("\"results\"") != std::string::npos, s.out);
}

// tools/sim_vs_live_run_speed.py: each (policy, load) run's engine speed comes from the live step
// logs of that run's windows only (every live*/client.csv), and replaces the calibrated
// contention in the replayed cluster file.
BOOST_AUTO_TEST_CASE(run_speed_replays_each_run_at_the_engine_speed_its_step_logs_show) {
  dls::test::scratch_dir dir;
  const auto profile = dls::test::write_two_degree_profile(dir, 0.001);
  for (const char* sub : {"live", "live2", "steps-live"}) BOOST_TEST_REQUIRE(::mkdir(dir.file(sub).c_str(), 0755) == 0);
  std::ofstream(dir.file("cluster-sim-model-static.yaml"))
      << "name: t\nengine: {block_length: 8, threshold: 0.9, max_batch: 8}\nmax_canvas: 64\n"
      << "nodes:\n  - {name: cpu, devices: {kind: cpu, count: 1}, groups: [1]}\n"
      << "scheduler: {profile: " << profile << ", quality: " << DLS_SOURCE_DIR << "/configs/quality/tiny-llada.json}\n"
      << "control_plane: {request_ms: 0, cpu_ms: 0, cores: 1, step_ms: 0.1, slo_step_ms: 0.05, group_ms: 0, "
      << "contention: {window_ms: 100, slowdown: [{busy: 0.1, factor: 1.3}, {busy: 0.9, factor: 0.9}]}}\n";
  {
    std::ofstream a(dir.file("live/arrivals.csv"));
    a << "TIMESTAMP,ContextTokens,GeneratedTokens,DecodedTokens\n";
    for (int i = 0; i < 20; ++i) a << 0.01 * i << ",16,16,8\n";
  }
  std::ofstream(dir.file("live/bench.json")) << R"({"capacity_rps": 200})";
  const std::string client_header =
      "policy,load,send_lag_p99_s,client_latency_p50_s,client_latency_p99_s,first_block_p50_s,first_block_p99_s,retried,"
      "start_unix_s,end_unix_s\n";
  std::ofstream(dir.file("live/client.csv")) << client_header << "static,0.5,0,0,0,0,0,0,100,200\n";
  std::ofstream(dir.file("live2/client.csv")) << client_header << "static,0.5,0,0,0,0,0,0,300,400\n";
  // Run 1 at 0.8 of the profile, run 2 at 0.6; the step between them (a calibration's) is not a run's.
  std::ofstream(dir.file("steps-live/node0-g0.csv"))
      << "run,start_s,wall_s,engine_s,predicted_s,batch,refreshes,ran_refreshes,query_rows,key_rows,active,waiting\n"
      << "node0/g0,150,0.002,0.0016,0.002,1,1,1,16,16,1,0\n"
      << "node0/g0,160,0.002,0.0016,0.002,1,0,0,8,16,1,0\n"
      << "node0/g0,250,0.002,0.02,0.002,1,1,1,16,16,1,0\n"
      << "node0/g0,350,0.002,0.0012,0.002,1,1,1,16,16,1,0\n";
  std::ofstream(dir.file("comparison.json"))
      << R"([{"policy": "static", "load": 0.5, "live_attainment": 0.5, "live_mean_s": 0.01, "within_target": false}])";
  const auto script = std::string(DLS_SOURCE_DIR) + "/tools/sim_vs_live_run_speed.py";
  const auto out = dir.file("out.txt");
  const auto cmd = "python3 " + script + " " + dir.path() + " --bin " + DLS_DILASERVE + " > " + out + " 2>&1";
  BOOST_TEST_REQUIRE(std::system(cmd.c_str()) == 0, std::ifstream(out).rdbuf());
  std::stringstream printed;
  printed << std::ifstream(out).rdbuf();
  BOOST_TEST(printed.str().find("static      0.50  0.700 |") != std::string::npos, printed.str());
  BOOST_TEST(printed.str().find("points within 5 points and 15 % at each run's own engine speed (0 as predicted)") !=
                 std::string::npos,
             printed.str());
  std::stringstream replayed;
  replayed << std::ifstream(dir.file("run-speed/static-0.5.yaml")).rdbuf();
  BOOST_TEST(replayed.str().find("slowdown: [{busy: 0, factor: 0.7000}, {busy: 1, factor: 0.7000}]") != std::string::npos,
             replayed.str());
  BOOST_TEST(replayed.str().find("1.3") == std::string::npos, replayed.str());
  // Without a comparison to replay it says what to run first.
  ::unlink(dir.file("comparison.json").c_str());
  BOOST_TEST(std::system(cmd.c_str()) != 0);
  std::stringstream refused;
  refused << std::ifstream(out).rdbuf();
  BOOST_TEST(refused.str().find("run tools/sim_vs_live.sh first") != std::string::npos, refused.str());
}

BOOST_AUTO_TEST_CASE(profile_refuses_a_grid_the_model_or_machine_cannot_run) {
  const auto model = dls::test::model_dir();
  expect_one_line_error({"profile", "--model", model, "--tp", "3"}, 1,
                        "--tp 3: TP degree 3 does not divide the head count (4 heads)");
  expect_one_line_error({"profile", "--model", model, "--lengths", "100"}, 1, "max_sequence_length (64)");
  expect_one_line_error({"profile", "--batches", "0"}, 2, "--batches: Value 0 not in range 1 to 256");
  expect_one_line_error({"profile", "--batches", "100000000"}, 2, "--batches: Value 100000000 not in range 1 to 256");
}

// Sizes no machine here could hold are refused before anything is allocated or written.
BOOST_AUTO_TEST_CASE(benchmarks_refuse_absurd_sizes_with_one_line) {
  expect_one_line_error({"bench-engine", "--lengths", "100000000"}, 1, "--lengths: 100000000 is outside (32, 8192]");
  expect_one_line_error({"bench-runtime", "--lengths", "100000000"}, 1, "--lengths: 100000000 is outside [1, 4096]");
  // The largest random model the options allow: 430 GB of f32 weights, more than any host here.
  expect_one_line_error({"bench-engine", "--d-model", "8192", "--layers", "128", "--vocab", "262144", "--skip-tp"}, 1,
                        "a random model of d_model 8192, 128 layers and a vocabulary of 262144 (f32) needs 429.6 GB of memory");
  expect_one_line_error({"bench-runtime", "--live-d-model", "100000"}, 2, "--live-d-model: Value 100000 not in range");
  expect_one_line_error({"write-random-checkpoint", "--shape", "llada-8b", "--layers", "100000", "/tmp/unused"}, 2,
                        "--layers: Value 100000 not in range 1 to 256");
  // The widest and deepest shape the options allow: 9.8 TB, more than any disk here has free.
  dls::test::scratch_dir dir;
  const auto ckpt = dir.file("deep");
  expect_one_line_error({"write-random-checkpoint", "--shape", "llada-8b", "--layers", "256", "--hidden-size", "32768",
                         "--heads", "256", "--mlp", "151552", ckpt},
                        1, "the checkpoint needs 9843.49 GB of bf16 weights, but");
  BOOST_TEST(!std::filesystem::exists(ckpt));
}

// A trace replay's send times (`at_s`) are checked before anything is sent: each mistake is
// one line naming the file, the line and the rule.
BOOST_AUTO_TEST_CASE(submit_send_times_are_refused_naming_the_line) {
  dls::test::scratch_dir dir;
  auto file = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.file(name)) << text;
    return dir.file(name);
  };
  // No cluster answers at this address: every case must fail before connecting.
  auto submit = [](const std::string& f, std::vector<std::string> extra = {}) {
    std::vector<std::string> a{"submit", "--file", f, "--address", "127.0.0.1:1", "--token-file", "/nonexistent"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  expect_one_line_error(submit(file("neg.jsonl", "{\"prompt\":\"a\",\"at_s\":-1}\n")), 1,
                        "neg.jsonl:1: \"at_s\" must be a number in [0, 86400], got -1");
  expect_one_line_error(submit(file("str.jsonl", "{\"prompt\":\"a\",\"at_s\":\"1\"}\n")), 1,
                        "str.jsonl:1: \"at_s\" must be a number");
  expect_one_line_error(submit(file("some.jsonl", "{\"prompt\":\"a\",\"at_s\":0}\n{\"prompt\":\"b\"}\n")), 1,
                        "some.jsonl:2: \"at_s\" must be given on every line or on none");
  expect_one_line_error(submit(file("back.jsonl", "{\"prompt\":\"a\",\"at_s\":2}\n{\"prompt\":\"b\",\"at_s\":1}\n")), 1,
                        "back.jsonl:2: \"at_s\" must not decrease from one line to the next");
  expect_one_line_error(submit(file("rate.jsonl", "{\"prompt\":\"a\",\"at_s\":0}\n"), {"--rate", "5"}), 1,
                        "rate.jsonl: --rate and \"at_s\" in the file exclude each other");
}

// Dream's options on `generate` and `submit`: each bad value is one line naming the flag, or the
// file, line and field, before anything is decoded or sent.
BOOST_AUTO_TEST_CASE(dream_options_are_refused_naming_the_flag_or_the_field) {
  expect_one_line_error({"generate", "--prompt", "A1+1=", "--schedule", "linear"}, 2, "--schedule");
  expect_one_line_error({"generate", "--prompt", "A1+1=", "--rule", "origins"}, 2, "--rule");
  expect_one_line_error({"generate", "--prompt", "A1+1=", "--schedule", "dream_linear"}, 1,
                        "schedule dream_linear sets how many a quota, margin or entropy step commits; the threshold "
                        "rule chooses its own count");
  expect_one_line_error({"generate", "--prompt", "A1+1=", "--rule", "origin", "--alg-temp", "1"}, 1,
                        "needs the quota, margin or entropy rule, not origin");
  std::vector<std::string> to_nowhere{"--address", "127.0.0.1:1", "--token-file", "/nonexistent"};
  auto submit = [&](std::vector<std::string> a) {
    a.insert(a.begin(), "submit");
    a.insert(a.end(), to_nowhere.begin(), to_nowhere.end());
    return a;
  };
  expect_one_line_error(submit({"--prompt", "a", "--top-p", "0"}), 2, "--top-p: must be > 0, got 0");
  expect_one_line_error(submit({"--prompt", "a", "--top-p", "1.5"}), 2, "--top-p: must be in (0, 1], got 1.5");
  expect_one_line_error(submit({"--prompt", "a", "--top-k", "-1"}), 2, "--top-k: must be >= 0, got -1");
  expect_one_line_error(submit({"--prompt", "a", "--top-k", "2.5"}), 2, "--top-k");
  expect_one_line_error(submit({"--prompt", "a", "--alg-temp", "nan"}), 2, "--alg-temp: 'nan' is not a number");
  expect_one_line_error(submit({"--prompt", "a", "--schedule", "linear"}), 2, "--schedule");
  expect_one_line_error(submit({"--prompt", "a", "--eps", "1"}), 2, "--eps: must be in [0, 1), got 1");
  expect_one_line_error(submit({"--prompt", "a", "--rule", "bogus"}), 2, "--rule: bogus not in");
  expect_one_line_error(submit({"--prompt", "a", "--steps-per-block", "-1"}), 2, "--steps-per-block");
  expect_one_line_error(submit({"--prompt", "a", "--steps-per-block", "8193"}), 2, "--steps-per-block");
  dls::test::scratch_dir dir;
  auto line = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.file(name)) << text << "\n";
    return submit({"--file", dir.file(name)});
  };
  expect_one_line_error(line("p.jsonl", R"({"prompt":"a","top_p":0})"), 1,
                        "p.jsonl:1: \"top_p\" must be a number in (0, 1], got 0");
  expect_one_line_error(line("k.jsonl", R"({"prompt":"a","top_k":-3})"), 1,
                        "k.jsonl:1: \"top_k\" must be an integer in [0, 2147483647], got -3");
  expect_one_line_error(line("a.jsonl", R"({"prompt":"a","alg_temp":"hot"})"), 1,
                        "a.jsonl:1: \"alg_temp\" must be a finite number >= 0, got \"hot\"");
  expect_one_line_error(line("e.jsonl", R"({"prompt":"a","eps":1})"), 1,
                        "e.jsonl:1: \"eps\" must be a number in [0, 1), got 1");
  expect_one_line_error(line("s.jsonl", R"({"prompt":"a","schedule":"linear"})"), 1,
                        "s.jsonl:1: \"schedule\" must be \"even\" or \"dream_linear\", got \"linear\"");
  expect_one_line_error(line("c.jsonl", R"({"prompt":"a","commit":"topk_margin"})"), 1,
                        "c.jsonl:1: \"commit\" must be one of \"quota\", \"threshold\", \"factor\", \"margin\", "
                        "\"entropy\", \"origin\", got \"topk_margin\"");
  expect_one_line_error(line("n.jsonl", R"({"prompt":"a","commit":1})"), 1, "n.jsonl:1: \"commit\" must be one of");
  expect_one_line_error(line("b.jsonl", R"({"prompt":"a","commit":"quota","steps_per_block":8193})"), 1,
                        "b.jsonl:1: \"steps_per_block\" must be an integer in [0, 8192], got 8193");
}

namespace {
nlohmann::json eval_json(std::vector<std::string> extra) {
  std::vector<std::string> a{"eval", "--model", std::string(DLS_SOURCE_DIR) + "/models/tiny-llada", "--n", "200", "--json"};
  a.insert(a.end(), extra.begin(), extra.end());
  auto r = dls::test::run_cli(a);
  BOOST_REQUIRE_MESSAGE(r.rc == 0, "eval: rc " << r.rc << ", stderr: " << r.err);
  return nlohmann::json::parse(r.out);
}

void expect_same_decodes(const nlohmann::json& a, const nlohmann::json& b) {
  BOOST_TEST(a["accuracy"].get<double>() == b["accuracy"].get<double>());
  BOOST_TEST(a["tokens_per_step"].get<double>() == b["tokens_per_step"].get<double>());
  BOOST_TEST(a["refresh_steps"].get<long>() == b["refresh_steps"].get<long>());
  BOOST_TEST(a["reuse_steps"].get<long>() == b["reuse_steps"].get<long>());
}
}  // namespace

// eval counts every block by the steps it took (the spread the policies need for refreshes
// inside a block): the counts add up to the blocks, which, with a refresh only at each block's
// start, are the refresh steps, and their steps to all the steps; with a refresh every 2 steps a
// block of k steps refreshes ceil(k / 2) times.
BOOST_AUTO_TEST_CASE(eval_counts_the_blocks_by_the_steps_they_took) {
  for (const char* every : {"0", "2"}) {
    const auto j = eval_json({"--threshold", "0.9", "--refresh-interval", every});
    const auto counts = j["block_steps"].get<std::vector<long>>();
    BOOST_TEST_REQUIRE(counts.size() >= 2u);
    long blocks = 0, steps = 0, refreshes = 0;
    for (std::size_t k = 0; k < counts.size(); ++k) {
      const long s = static_cast<long>(k) + 1;
      blocks += counts[k];
      steps += s * counts[k];
      refreshes += (every[0] == '0' ? 1 : (s + 1) / 2) * counts[k];
    }
    BOOST_TEST(steps == j["refresh_steps"].get<long>() + j["reuse_steps"].get<long>());
    BOOST_TEST(refreshes == j["refresh_steps"].get<long>());
    BOOST_TEST(j["refresh_interval"].get<int>() == std::stoi(every));
    BOOST_TEST(blocks >= 200);  // at least one block per problem
  }
}

// The tau switch within each answer that measures how a request lowered for part of it loses
// accuracy (the accuracy budget's charge): switching at block 0 is the second tau throughout,
// switching past the last block the first.
BOOST_AUTO_TEST_CASE(eval_with_a_tau_switch_decodes_at_the_first_tau_before_it_and_the_second_after) {
  const auto at_07 = eval_json({"--threshold", "0.7"});
  const auto at_09 = eval_json({"--threshold", "0.9"});
  BOOST_TEST(at_07["tokens_per_step"].get<double>() > at_09["tokens_per_step"].get<double>());
  const auto from_0 = eval_json({"--threshold", "0.9", "--then-threshold", "0.7", "--after-blocks", "0"});
  expect_same_decodes(from_0, at_07);
  BOOST_TEST(from_0["then_threshold"].get<double>() == 0.7);
  BOOST_TEST(from_0["after_blocks"].get<int>() == 0);
  BOOST_TEST(from_0["then_share"].get<double>() == 1.0);
  expect_same_decodes(eval_json({"--threshold", "0.9", "--then-threshold", "0.7", "--after-steps", "0"}), at_07);
  const auto never = eval_json({"--threshold", "0.9", "--then-threshold", "0.7", "--after-blocks", "1000"});
  expect_same_decodes(never, at_09);
  BOOST_TEST(never["then_share"].get<double>() == 0.0);
  // After one step: the first step's tokens at 0.9, the rest at 0.7, so a share in (0, 1).
  const auto after_1 = eval_json({"--threshold", "0.9", "--then-threshold", "0.7", "--after-steps", "1"});
  BOOST_TEST(after_1["then_share"].get<double>() > 0.0);
  BOOST_TEST(after_1["then_share"].get<double>() < 1.0);
  // Switched after the first block of a two-block answer: the first block's steps are 0.9's.
  const auto first_09 = eval_json({"--gen-length", "16", "--threshold", "0.9", "--then-threshold", "0.7", "--after-blocks", "1"});
  const auto all_09 = eval_json({"--gen-length", "16", "--threshold", "0.9"});
  const auto all_07 = eval_json({"--gen-length", "16", "--threshold", "0.7"});
  BOOST_TEST(first_09["refresh_steps"].get<long>() + first_09["reuse_steps"].get<long>() <=
             all_09["refresh_steps"].get<long>() + all_09["reuse_steps"].get<long>());
  BOOST_TEST(first_09["refresh_steps"].get<long>() + first_09["reuse_steps"].get<long>() >=
             all_07["refresh_steps"].get<long>() + all_07["reuse_steps"].get<long>());
}

BOOST_AUTO_TEST_CASE(a_tau_switch_needs_both_options_and_the_threshold_rule) {
  const std::string both = "--then-threshold goes with one of --after-blocks and --after-steps";
  expect_one_line_error({"eval", "--then-threshold", "0.7"}, 1, both);
  expect_one_line_error({"eval", "--after-blocks", "1"}, 1, both);
  expect_one_line_error({"eval", "--then-threshold", "0.7", "--after-blocks", "1", "--after-steps", "1"}, 1, both);
  expect_one_line_error({"eval", "--rule", "quota", "--then-threshold", "0.7", "--after-blocks", "1"}, 1,
                        "--then-threshold needs the threshold rule");
  expect_one_line_error({"eval", "--then-threshold", "nan", "--after-blocks", "1"}, 2, "--then-threshold: 'nan' is not a number");
}

BOOST_AUTO_TEST_CASE(bench_migration_compares_with_perftest_as_it_comes_and_configured_as_ours) {
  auto r = dls::test::run_cli({"bench-migration", "--no-live", "--tls", "tcp", "--sizes", "65536", "--lengths", "64",
                               "--reps", "1", "--window", "2", "--json", "--model",
                               std::string(DLS_SOURCE_DIR) + "/models/tiny-llada"});
  BOOST_TEST_REQUIRE(r.rc == 0, r.err);
  const auto j = nlohmann::json::parse(r.out);
  BOOST_TEST_REQUIRE(j["transports"].size() == 1u);
  const auto& size = j["transports"][0]["sizes"].at(0);
  BOOST_TEST(size["bytes"].get<std::size_t>() == 65536u);
  for (const char* field : {"ours_gbps", "perftest_gbps", "perftest_like_ours_gbps", "ratio", "ratio_like_ours"})
    BOOST_TEST(size[field].get<double>() > 0.0, field << " in " << size.dump());
  BOOST_TEST(size["ratio_like_ours"].get<double>() ==
                 size["ours_gbps"].get<double>() / size["perftest_like_ours_gbps"].get<double>(),
             boost::test_tools::tolerance(1e-9));
  expect_one_line_error({"bench-migration", "--window", "-1"}, 2, "--window");
  expect_one_line_error({"bench-migration", "--sizes", "99999999999999"}, 1, "--sizes: 99999999999999 bytes is outside");
  expect_one_line_error({"bench-migration", "--lengths", "100000000"}, 1, "--lengths: 100000000 is outside");
}
