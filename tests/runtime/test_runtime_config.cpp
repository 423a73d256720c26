// An invalid cluster file is rejected with one line naming the
// file, line, column and problem, both by the parser and by `dilaserve up`.
#define BOOST_TEST_MODULE test_runtime_config
#include <boost/test/unit_test.hpp>

#include "cluster_fixture.hpp"
#include "runtime/cluster_config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

namespace rt = dls::runtime;

namespace {

const char* good = R"(name: t
auth: {token: secret-token}
head: {host: 127.0.0.1, port: 0}
nodes:
  - name: a
    devices: {kind: cpu, count: 2}
    groups: [1, 1]
model: {path: /tmp}
)";

// Returns the error line for `text`, or "" when it parsed.
std::string error_of(const std::string& text) {
  try {
    rt::parse_cluster_config(text, "bad.yaml", "/tmp");
  } catch (const rt::config_error& e) {
    return e.what();
  }
  return "";
}

void check_error(const std::string& text, const std::string& position, const std::string& words) {
  auto err = error_of(text);
  BOOST_TEST_CONTEXT("error: " << err) {
    BOOST_TEST(err.rfind("bad.yaml:" + position + ": error: ", 0) == 0u);
    BOOST_TEST(err.find(words) != std::string::npos);
    BOOST_TEST(err.find('\n') == std::string::npos);
  }
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto pos = s.find(from);
  BOOST_REQUIRE(pos != std::string::npos);
  return s.replace(pos, from.size(), to);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_valid_file_parses) {
  auto cfg = rt::parse_cluster_config(good, "good.yaml", "/tmp");
  BOOST_TEST(cfg.name == "t");
  BOOST_TEST(cfg.nodes.size() == 1u);
  BOOST_TEST(cfg.nodes[0].devices.slots() == 2);
  BOOST_TEST(cfg.nodes[0].groups.size() == 2u);
}

BOOST_AUTO_TEST_CASE(the_shipped_configs_parse) {
  for (auto name : {"local.yaml", "local-2node.yaml"}) {
    auto cfg = rt::load_cluster_config(std::string(DLS_SOURCE_DIR) + "/configs/" + name);
    BOOST_TEST(!cfg.nodes.empty());
    BOOST_TEST(cfg.model_path.find("models/tiny-llada") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(malformed_yaml_names_line_and_column) {
  check_error(replace(good, "groups: [1, 1]", "groups: [1, 1"), "8:6", "end of sequence flow not found");
}

BOOST_AUTO_TEST_CASE(wrong_type) {
  check_error(replace(good, "count: 2", "count: two"), "6:33", "must be an integer, got 'two'");
}

BOOST_AUTO_TEST_CASE(unknown_key) {
  check_error(replace(good, "name: t\n", "name: t\nnodez: 1\n"), "2:1", "unknown key 'nodez'");
}

BOOST_AUTO_TEST_CASE(missing_field) {
  check_error(replace(good, "auth: {token: secret-token}\n", ""), "1:1", "missing field 'auth'");
}

BOOST_AUTO_TEST_CASE(duplicate_node) {
  auto text = replace(good, "model:", "  - name: a\n    devices: {kind: cpu, count: 1}\nmodel:");
  check_error(text, "8:11", "duplicate node name 'a'");
}

BOOST_AUTO_TEST_CASE(more_devices_in_groups_than_the_node_has) {
  check_error(replace(good, "groups: [1, 1]", "groups: [2, 1]"), "7:13", "groups use 3 devices but the node has 2");
}

BOOST_AUTO_TEST_CASE(up_prints_the_one_line_error) {
  dls::test::scratch_dir dir;
  auto path = dir.file("bad.yaml");
  std::ofstream(path) << replace(good, "count: 2", "count: [2]");
  auto r = dls::test::run_cli({"up", path, "--state-dir", dir.file("state")});
  BOOST_TEST(r.rc != 0);
  BOOST_TEST(r.err == "dilaserve: error: " + path + ":6:33: error: node 'a' devices.count must be an integer\n");
}

// A UCX transport this host lacks stops the node at start, and `up` fails naming it.
BOOST_AUTO_TEST_CASE(up_names_a_missing_ucx_transport) {
  dls::test::scratch_dir dir;
  auto path = dls::test::write_test_config(dir, "local.yaml", 0, "ucx: {tls: 'tcp,cuda_ipc', net_devices: lo}");
  auto r = dls::test::run_cli({"up", path, "--state-dir", dir.file("state"), "--timeout", "60"});
  BOOST_TEST(r.rc != 0);
  BOOST_TEST(r.err.find("UCX transport 'cuda_ipc'") != std::string::npos, r.err);
  BOOST_TEST(r.err.find('\n') == r.err.size() - 1, "one line: " + r.err);
  dls::test::run_cli({"down", "--state-dir", dir.file("state")});
}

BOOST_AUTO_TEST_CASE(auth_roles_tls_and_insecure_are_checked) {
  auto cfg = rt::parse_cluster_config(replace(good, "auth: {token: secret-token}",
                                              "auth: {token: secret-token, submit_token: submit-token-1, "
                                              "node_token: node-token-1, tls_dir: certs}"),
                                      "good.yaml", "/tmp");
  BOOST_TEST(cfg.submit_token == "submit-token-1");
  BOOST_TEST(cfg.node_token == "node-token-1");
  BOOST_TEST(cfg.tls_dir == "/tmp/certs");
  BOOST_TEST(!cfg.insecure);
  BOOST_TEST(rt::parse_cluster_config(replace(good, "auth: {token: secret-token}",
                                              "auth: {token: secret-token, insecure: true}"),
                                      "good.yaml", "/tmp")
                 .insecure);
  check_error(replace(good, "auth: {token: secret-token}", "auth: {token: secret-token, insecure: yes-please}"),
              "2:39", "auth.insecure must be one of false, true");
  check_error(replace(good, "auth: {token: secret-token}", "auth: {token: secret-token, submit_token: secret-token}"),
              "2:7", "must differ");
  check_error(replace(good, "auth: {token: secret-token}", "auth: {token: secret-token, node_token: short}"),
              "2:41", "auth.node_token must have at least 8 characters");
  check_error(replace(good, "auth: {token: secret-token}",
                      "auth: {token: secret-token, insecure: true, tls_dir: certs}"),
              "2:54", "makes no sense");
  check_error(replace(good, "auth: {token: secret-token}", "auth: {token: secret-token, tls: on}"), "2:29",
              "unknown key 'tls' in auth");
}

BOOST_AUTO_TEST_CASE(dreams_engine_keys_parse_strictly) {
  auto cfg = rt::parse_cluster_config(std::string(good) +
                                          "engine: {commit: origin, steps_per_block: 6, schedule: dream_linear, "
                                          "top_p: 0.9, top_k: 5, seed: 3}\n",
                                      "good.yaml", "/tmp");
  const auto& d = cfg.engine.decode;
  BOOST_TEST((d.rule == dls::common::commit_rule::origin));
  BOOST_TEST(d.steps_per_block == 6);
  BOOST_TEST((d.schedule == dls::common::step_schedule::dream_linear));
  BOOST_TEST(d.top_p == 0.9);
  BOOST_TEST(d.top_k == 5);
  BOOST_TEST((rt::parse_cluster_config(std::string(good) + "engine: {commit: quota}\n", "good.yaml", "/tmp")
                  .engine.decode.schedule == dls::common::step_schedule::even));
  check_error(std::string(good) + "engine: {schedule: linear}\n", "9:20",
              "engine.schedule must be one of dream_linear, even, got 'linear'");
  check_error(std::string(good) + "engine: {commit: origins}\n", "9:18",
              "engine.commit must be one of entropy, factor, margin, origin, quota, threshold, got 'origins'");
  check_error(std::string(good) + "engine: {steps_per_block: -1}\n", "9:27", "engine.steps_per_block");
  check_error(std::string(good) + "engine: {commit: threshold, schedule: dream_linear}\n", "9:9",
              "engine: schedule dream_linear sets how many a quota, margin or entropy step commits; the threshold "
              "rule chooses its own count");
}

BOOST_AUTO_TEST_CASE(the_share_of_nodes_draining_at_once_is_a_reconfigure_key) {
  BOOST_TEST(rt::parse_cluster_config(good, "good.yaml", "/tmp").reconfigure.max_fraction == 0.25);
  const auto cfg = rt::parse_cluster_config(std::string(good) + "reconfigure: {mode: auto, max_fraction: 0.5}\n", "good.yaml", "/tmp");
  BOOST_TEST(cfg.reconfigure.max_fraction == 0.5);
  check_error(std::string(good) + "reconfigure: {max_fraction: 1.5}\n", "9:29", "reconfigure.max_fraction");
}

BOOST_AUTO_TEST_CASE(the_migration_planner_reads_the_shared_migration_section) {
  const auto plain = rt::parse_cluster_config(good, "good.yaml", "/tmp");
  BOOST_TEST(plain.migration.interval_ms == 100);
  BOOST_TEST(plain.migration.max_moves == 16);
  BOOST_TEST(plain.migration.imbalance == 1.5);
  const auto cfg = rt::parse_cluster_config(std::string(good) + "migration: {interval_ms: 250, max_moves: 4, imbalance: 2}\n",
                                            "good.yaml", "/tmp");
  BOOST_TEST(cfg.migration.interval_ms == 250);
  BOOST_TEST(cfg.migration.max_moves == 4);
  BOOST_TEST(cfg.migration.imbalance == 2.0);
  check_error(std::string(good) + "migration: {imbalance: 0.5}\n", "9:24", "migration.imbalance");
  check_error(std::string(good) + "migration: {moves: 3}\n", "9:13", "moves");
}

BOOST_AUTO_TEST_CASE(the_tau_control_interval_is_a_scheduler_key) {
  BOOST_TEST(rt::parse_cluster_config(good, "good.yaml", "/tmp").scheduler.control_interval_ms == 20);
  const auto cfg = rt::parse_cluster_config(std::string(good) + "scheduler: {control_interval_ms: 50}\n", "good.yaml", "/tmp");
  BOOST_TEST(cfg.scheduler.control_interval_ms == 50);
  check_error(std::string(good) + "scheduler: {control_interval_ms: 0}\n", "9:34", "scheduler.control_interval_ms");
}

// The head runs one CAF scheduler thread unless `head.caf` says otherwise; `caf` applies to
// every process and `head.caf` to the head after it, so each wins where it applies.
BOOST_AUTO_TEST_CASE(the_head_runs_one_scheduler_thread_unless_head_caf_says_otherwise) {
  auto last_threads = [](const std::vector<std::string>& args) {
    std::string v;
    for (const auto& a : args)
      if (a.rfind("--scheduler.max-threads=", 0) == 0) v = a.substr(a.find('=') + 1);
    return v;
  };
  auto plain = rt::parse_cluster_config(good, "good.yaml", "/tmp");
  BOOST_TEST(last_threads(plain.head_process_caf_args()) == "1");
  BOOST_TEST(last_threads(plain.process_caf_args()).empty());  // the nodes keep CAF's setup default
  auto both = rt::parse_cluster_config(
      replace(replace(good, "port: 0}", "port: 0, caf: {scheduler: {max-threads: 3}}}"), "model:",
              "caf: {scheduler: {max-threads: 4}}\nmodel:"),
      "good.yaml", "/tmp");
  BOOST_TEST(last_threads(both.process_caf_args()) == "4");
  BOOST_TEST(last_threads(both.head_process_caf_args()) == "3");
  auto global_only = rt::parse_cluster_config(replace(good, "model:", "caf: {scheduler: {max-threads: 4}}\nmodel:"),
                                              "good.yaml", "/tmp");
  BOOST_TEST(last_threads(global_only.head_process_caf_args()) == "1");
  check_error(replace(good, "port: 0}", "port: 0, caf: [1]}"), "3:39", "head.caf must be a mapping");
  check_error(replace(good, "port: 0}", "port: 0, caf: {scheduler: {max-threads: }}}"), "3:65",
              "head.caf.scheduler.max-threads has no value");
}

// A CPU device slot is meant to be a core: `up` warns, in one line naming the nodes, when the
// nodes on this host have more slots than it has cores, and says nothing when they fit.
BOOST_AUTO_TEST_CASE(up_warns_when_cpu_slots_outnumber_the_cores) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  BOOST_REQUIRE(cores > 0);
  auto nodes = [](int count) {
    return "nodes:\n  - name: wide\n    host: 127.0.0.1\n    devices: {kind: cpu, count: " + std::to_string(count) +
           "}\n    groups: [1]\n";
  };
  {
    dls::test::cluster c("local.yaml", 0, nodes(cores + 1));
    const auto& err = c.up_error_output();
    const auto expected = "puts " + std::to_string(cores + 1) + " CPU device slots on this host's " +
                          std::to_string(cores) + " cores (nodes wide)";
    BOOST_TEST(err.find(expected) != std::string::npos, err);
    BOOST_TEST(std::count(err.begin(), err.end(), '\n') == 1, err);
  }
  dls::test::cluster fits("local.yaml", 0, nodes(1));
  BOOST_TEST(fits.up_error_output().find("CPU device slots") == std::string::npos, fits.up_error_output());
}

// A profile `up` measured serves clusters with other state directories through
// --profile-cache, until something it depends on changes (a setting of the file, the model's
// files) or the cached file is unusable.
BOOST_AUTO_TEST_CASE(up_keeps_a_measured_profile_for_other_state_directories_until_it_is_stale) {
  namespace fs = std::filesystem;
  dls::test::scratch_dir dir;
  const auto cache = dir.file("profiles");
  // A model of our own, so that rewriting a file of it stales the profile.
  fs::copy(dls::test::model_dir(), dir.file("model"), fs::copy_options::recursive);
  auto config = [&](const std::string& name, const std::string& overrides) {
    auto root = YAML::LoadFile(dls::test::write_test_config(dir, "local.yaml", 0, overrides));
    root["model"]["path"] = dir.file("model");
    std::ofstream(dir.file(name)) << root << "\n";
    return dir.file(name);
  };
  const auto plain = config("plain.yaml", "");
  const auto other_block = config("block4.yaml", "engine: {gen_length: 16, block_length: 4, commit: threshold, threshold: 0.9, cache: dual, "
                                                 "refresh_interval: 4, max_batch: 8}");
  int states = 0;
  std::string profile;  // the last cluster's
  auto up = [&](const std::string& file) {
    const auto state = dir.file("state" + std::to_string(states++));
    auto r = dls::test::run_cli({"up", file, "--state-dir", state, "--timeout", "60", "--profile-cache", cache});
    BOOST_REQUIRE_MESSAGE(r.rc == 0, r.err);
    BOOST_REQUIRE_EQUAL(dls::test::run_cli({"down", "--state-dir", state}).rc, 0);
    std::ifstream in(state + "/profile.yaml");
    profile.assign(std::istreambuf_iterator<char>(in), {});
    return r;
  };
  auto measured = [](const dls::test::cli_result& r) {
    return r.out.find("measuring the step-cost profile") != std::string::npos;
  };
  auto reused = [](const dls::test::cli_result& r) {
    return r.out.find("step-cost profile: measured before on this machine") != std::string::npos;
  };
  auto r = up(plain);
  BOOST_TEST(measured(r), r.out);
  const auto first_profile = profile;
  r = up(plain);
  BOOST_TEST((reused(r) && !measured(r)), r.out);
  BOOST_TEST(profile == first_profile);
  BOOST_TEST(profile.find("transfer:") != std::string::npos);  // the link measured with it
  r = up(other_block);
  BOOST_TEST(measured(r), r.out);
  // A cached file cut short mid-sample is measured again, with a warning naming it.
  for (const auto& f : fs::directory_iterator(cache))
    if (f.path().extension() == ".yaml") std::ofstream(f.path()) << "format: dilaserve-step-profile/1\nsamples:\n  - {tp: 1, kind: ref";
  r = up(plain);
  BOOST_TEST(measured(r), r.out);
  BOOST_TEST(r.err.find("the cached profile " + cache) != std::string::npos, r.err);
  BOOST_TEST(r.err.find("is unusable") != std::string::npos, r.err);
  r = up(plain);  // and the new measurement is kept
  BOOST_TEST(reused(r), r.out);
  // Rewritten weights (a newer time) are another model.
  const auto weights = fs::path(dir.file("model")) / "model.safetensors";
  fs::last_write_time(weights, fs::last_write_time(weights) + std::chrono::seconds(5));
  r = up(plain);
  BOOST_TEST(measured(r), r.out);
}
