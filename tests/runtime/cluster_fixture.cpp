#include "cluster_fixture.hpp"

#include <boost/test/results_collector.hpp>
#include <boost/test/unit_test.hpp>

#include "runtime/process.hpp"
#include "runtime/state_dir.hpp"

#include <yaml-cpp/yaml.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace dls::test {

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int spawn(const std::vector<std::string>& args, const std::string& out, const std::string& err) {
  std::vector<std::string> argv{DLS_DILASERVE};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c;
  for (auto& a : argv) c.push_back(a.data());
  c.push_back(nullptr);
  int pid = ::fork();
  if (pid == 0) {
    int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::execv(c[0], c.data());
    ::_exit(127);
  }
  return pid;
}

cli_result collect(int pid, const std::string& out, const std::string& err) {
  cli_result r;
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

std::string temp_name(const std::string& stem) {
  static int counter = 0;
  return (fs::temp_directory_path() / (stem + "." + std::to_string(::getpid()) + "." + std::to_string(counter++)))
      .string();
}

}  // namespace

cli_result run_cli(const std::vector<std::string>& args) {
  auto out = temp_name("dls-out"), err = temp_name("dls-err");
  return collect(spawn(args, out, err), out, err);
}

background_cli::background_cli(const std::vector<std::string>& args)
    : out_path_(temp_name("dls-bg-out")), err_path_(temp_name("dls-bg-err")) {
  pid_ = spawn(args, out_path_, err_path_);
}

background_cli::~background_cli() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    collect(pid_, out_path_, err_path_);
  }
}

void background_cli::signal(int sig) const {
  if (pid_ > 0) ::kill(pid_, sig);
}

cli_result background_cli::wait() {
  auto r = collect(pid_, out_path_, err_path_);
  pid_ = -1;
  return r;
}

scratch_dir::scratch_dir() {
  auto tmpl = (fs::temp_directory_path() / "dls-test-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

scratch_dir::~scratch_dir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string model_dir() {
  // DLS_TEST_MODEL_DIR points the runtime tests at another trained model folder (with its
  // eval.jsonl), e.g. a fresh training run, without touching models/.
  if (const char* dir = std::getenv("DLS_TEST_MODEL_DIR"); dir && *dir) return dir;
  return std::string(DLS_SOURCE_DIR) + "/models/tiny-llada";
}

std::string write_two_degree_profile(const scratch_dir& dir, double tp2_fixed_s) {
  const auto path = dir.file("profile.yaml");
  std::ofstream(path) << "format: dilaserve-step-profile/1\nkind: linear\nhardware: test\nmodel: test\n"
                         "source: hand-written for a runtime test\nlinear:\n"
                         "  1: {fixed_s: 0.0005, per_request_s: 0.0001, per_query_row_s: 0.00002}\n"
                         "  2: {fixed_s: "
                      << tp2_fixed_s << ", per_request_s: 0.00006, per_query_row_s: 0.000012}\n";
  return path;
}

std::string write_test_config(const scratch_dir& dir, const std::string& name, int dead_after_ms,
                              const std::string& overrides) {
  auto root = YAML::LoadFile(std::string(DLS_SOURCE_DIR) + "/configs/" + name);
  if (!overrides.empty())
    for (const auto& kv : YAML::Load(overrides)) root[kv.first.Scalar()] = kv.second;
  root["head"]["port"] = 0;
  for (auto n : root["nodes"]) n["port"] = 0;
  root["model"]["path"] = model_dir();
  if (root["http"]) {
    root["http"]["port"] = 0;
    auto keys = root["http"]["api_keys_file"].as<std::string>();
    if (!keys.empty() && keys[0] != '/') root["http"]["api_keys_file"] = std::string(DLS_SOURCE_DIR) + "/configs/" + keys;
  }
  if (dead_after_ms > 0) root["heartbeat"]["dead_after_ms"] = dead_after_ms;
  // Files the scheduler names are relative to configs/, not to the scratch copy.
  if (root["scheduler"] && root["scheduler"].IsMap())
    for (const char* key : {"profile", "quality"})
      if (root["scheduler"][key] && root["scheduler"][key].Scalar().front() != '/')
        root["scheduler"][key] = std::string(DLS_SOURCE_DIR) + "/configs/" + root["scheduler"][key].Scalar();
  auto path = dir.file(name);
  std::ofstream out(path);
  out << root << "\n";
  return path;
}

cluster::cluster(const std::string& config_name, int dead_after_ms, const std::string& overrides) {
  state_dir_ = scratch_.file("state");
  auto cfg = write_test_config(scratch_, config_name, dead_after_ms, overrides);
  up_ = run_cli({"up", cfg, "--state-dir", state_dir_, "--timeout", "60"});
  if (up_.rc != 0) throw std::runtime_error("dilaserve up failed (" + std::to_string(up_.rc) + "): " + up_.err);
}

namespace {

// The last `lines` lines of a text file.
std::string tail_of(const fs::path& file, std::size_t lines) {
  std::ifstream in(file);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (auto i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += all[i] + "\n";
  return out;
}

// A cluster shared by a whole module ends after the framework has: then there is no test to ask.
bool current_test_failed() {
  namespace ut = boost::unit_test;
  if (!ut::framework::test_in_progress()) return false;
  return !ut::results_collector.results(ut::framework::current_test_case_id()).passed();
}

}  // namespace

cluster::~cluster() {
  // A failed test shows what its cluster's processes logged: CI keeps nothing else of them.
  try {
    if (std::uncaught_exceptions() > 0 || current_test_failed()) {
      std::error_code ec;
      for (const auto& f : fs::directory_iterator(fs::path(state_dir_) / "logs", ec))
        std::cerr << "---- last lines of " << f.path().filename().string() << " ----\n" << tail_of(f.path(), 40);
    }
  } catch (const std::exception& e) {
    std::cerr << "cannot show the cluster's logs: " << e.what() << "\n";
  }
  // Record the pids first: `down` removes the state file.
  std::vector<int> pids;
  try {
    for (auto& p : runtime::load_state(state_dir_).processes) pids.push_back(p.pid);
  } catch (const std::exception&) {
  }
  run_cli({"down", "--state-dir", state_dir_, "--timeout", "10"});
  for (int pid : pids)
    if (runtime::process_alive(pid)) {
      ::kill(pid, SIGKILL);
      runtime::wait_exit(pid, 5000);
    }
}

cli_result cluster::cli(std::vector<std::string> args) const {
  args.push_back("--state-dir");
  args.push_back(state_dir_);
  return run_cli(args);
}

background_cli cluster::cli_background(std::vector<std::string> args) const {
  args.push_back("--state-dir");
  args.push_back(state_dir_);
  return background_cli(args);
}

nlohmann::json cluster::json_cli(std::vector<std::string> args) const {
  args.push_back("--json");
  auto r = cli(args);
  if (r.rc != 0) throw std::runtime_error("dilaserve " + args[0] + " failed: " + r.err);
  return nlohmann::json::parse(r.out);
}

int cluster::pid_of(const std::string& name) const {
  for (auto& p : runtime::load_state(state_dir_).processes)
    if (p.name == name) return p.pid;
  throw std::runtime_error("no process named " + name);
}

}  // namespace dls::test

#include "gpu/canvas.hpp"
#include "gpu/cpu_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/eval_set.hpp"
#include "gpu/model.hpp"
#include "gpu/tokenizer.hpp"
#include "runtime/cluster_config.hpp"

#include <algorithm>
#include <chrono>

namespace dls::test {

std::vector<problem> eval_problems(std::size_t n, std::size_t min_answer_chars) {
  auto set = gpu::load_eval_set(model_dir() + "/eval.jsonl");
  std::vector<problem> out;
  for (auto& p : set) {
    if (out.size() == n) break;
    const bool long_enough = std::all_of(p.valid.begin(), p.valid.end(),
                                         [&](const std::string& a) { return a.size() >= min_answer_chars; });
    if (!p.valid.empty() && long_enough) out.push_back({p.prompt, p.valid, p.gen_length});
  }
  return out;
}

std::string write_prompts(const scratch_dir& dir, const std::vector<problem>& problems) {
  auto path = dir.file("prompts.jsonl");
  std::ofstream out(path);
  for (auto& p : problems) {
    nlohmann::json j{{"prompt", p.prompt}, {"valid", p.valid}};
    if (p.gen_length > 0) j["gen_length"] = p.gen_length;
    out << j.dump() << "\n";
  }
  return path;
}

std::vector<std::string> reference_answers(const std::string& config_name, const std::vector<problem>& problems,
                                           double threshold) {
  auto cfg = runtime::load_cluster_config(std::string(DLS_SOURCE_DIR) + "/configs/" + config_name);
  auto model = gpu::load_model(model_dir());
  auto tok = gpu::load_tokenizer(model_dir());
  gpu::engine e(gpu::make_cpu_backend(model));
  std::vector<std::string> out;
  for (auto& p : problems) {
    gpu::decode_params d = cfg.engine.decode;
    if (p.gen_length > 0) d.gen_length = p.gen_length;
    if (threshold >= 0) d.threshold = threshold;
    d.temperature = 0;
    std::vector<gpu::request_slot> slots;
    slots.push_back(e.admit(gpu::canvas::start(tok->encode(p.prompt), d, model->config.mask_id,
                                               model->config.eos_id)));
    gpu::decode_all(e, slots, 1);
    out.push_back(tok->decode(slots[0].c.answer()));
  }
  return out;
}

bool eventually(double seconds, const std::function<bool()>& probe) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end)
    if (probe()) return true;
  return false;
}

nlohmann::json only_group(const cluster& c) {
  const auto status = c.json_cli({"status"});
  if (status["groups"].size() != 1)
    throw std::runtime_error("status lists " + std::to_string(status["groups"].size()) + " groups, expected one");
  return status["groups"][0];
}

std::string node_state(const cluster& c, const std::string& node) {
  const auto status = c.json_cli({"status"});
  for (const auto& n : status["nodes"])
    if (n["name"] == node) return n["state"];
  return "";
}

}  // namespace dls::test
