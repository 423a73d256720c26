#include "cluster_fixture.hpp"

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

std::string model_dir() { return std::string(DLS_SOURCE_DIR) + "/models/tiny-llada"; }

std::string write_test_config(const scratch_dir& dir, const std::string& name) {
  auto root = YAML::LoadFile(std::string(DLS_SOURCE_DIR) + "/configs/" + name);
  root["head"]["port"] = 0;
  for (auto n : root["nodes"]) n["port"] = 0;
  root["model"]["path"] = model_dir();
  auto path = dir.file(name);
  std::ofstream out(path);
  out << root << "\n";
  return path;
}

cluster::cluster(const std::string& config_name) {
  state_dir_ = scratch_.file("state");
  auto cfg = write_test_config(scratch_, config_name);
  up_ = run_cli({"up", cfg, "--state-dir", state_dir_, "--timeout", "60"});
  if (up_.rc != 0) throw std::runtime_error("dilaserve up failed (" + std::to_string(up_.rc) + "): " + up_.err);
}

cluster::~cluster() {
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
