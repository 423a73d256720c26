#include "dilaserve/bench_cluster.hpp"

#include "runtime/process.hpp"
#include "runtime/state_dir.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <vector>

extern char** environ;

namespace dls::cli {

namespace rt = dls::runtime;

namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void on_interrupt(int) { g_interrupted.store(true); }

// Runs this binary with `args` in its own process group (a terminal's Ctrl-C then reaches
// only the bench, which stops the cluster in order), output appended to `log`. Returns the
// exit status.
int run_self(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv{rt::self_executable()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &fa, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The last line of `log` that says what went wrong, for a one-line error.
std::string last_error_line(const std::string& log) {
  std::ifstream in(log);
  std::string line, last, error;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    last = line;
    if (line.find("error") != std::string::npos) error = line;
  }
  return error.empty() ? last : error;
}

}  // namespace

void catch_interrupts() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool interrupted() { return g_interrupted.load(); }

void throw_if_interrupted() {
  if (interrupted()) throw std::runtime_error("interrupted");
}

owned_cluster::owned_cluster(const std::string& config, const std::string& state_dir, double slo_scale)
    : state_dir_(state_dir) {
  std::filesystem::create_directories(state_dir_);
  const auto log = state_dir_ + "/bench-up.log";
  std::vector<std::string> up{"up", config, "--state-dir", state_dir_};
  if (slo_scale > 0) {
    std::ostringstream s;
    s.precision(17);
    s << slo_scale;
    up.insert(up.end(), {"--slo-scale", s.str()});
  }
  running_ = true;  // up may have started processes even when it fails
  const int rc = run_self(up, log);
  if (rc != 0) {
    const auto why = last_error_line(log);
    try {
      stop();
    } catch (const std::exception& e) {
      throw std::runtime_error("starting the cluster failed (" + why + "), and stopping it: " + e.what());
    }
    throw std::runtime_error("starting the cluster failed: " + why + " (see " + log + ")");
  }
  if (interrupted()) {  // no destructor runs for a constructor that throws
    stop();
    throw std::runtime_error("interrupted");
  }
}

owned_cluster::~owned_cluster() {
  try {
    stop();
  } catch (const std::exception& e) {
    std::cerr << "dilaserve: error: stopping the bench's cluster: " << e.what() << "\n";
  }
}

void owned_cluster::stop() {
  if (!running_) return;
  running_ = false;
  if (!std::filesystem::exists(rt::state_file(state_dir_))) return;  // up cleaned up after itself
  const auto st = rt::load_state(state_dir_);
  const auto log = state_dir_ + "/bench-down.log";
  const int rc = run_self({"down", "--state-dir", state_dir_}, log);
  std::string left;
  for (const auto& p : st.processes)
    if (rt::signal_if_same(p.pid, p.identity, 0).result == rt::signal_result::sent)
      left += (left.empty() ? "" : ", ") + p.role + " " + p.name + " pid " + std::to_string(p.pid);
  if (!left.empty()) throw std::runtime_error("still running after `dilaserve down`: " + left + " (see " + log + ")");
  if (rc != 0) throw std::runtime_error("`dilaserve down` failed: " + last_error_line(log));
}

}  // namespace dls::cli
