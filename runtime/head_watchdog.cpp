#include "runtime/head_watchdog.hpp"

#include "runtime/log.hpp"
#include "runtime/process.hpp"
#include "runtime/state_dir.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>
#include <stdexcept>

namespace dls::runtime {

namespace {

volatile std::sig_atomic_t child_pid = 0;
volatile std::sig_atomic_t stop_requested = 0;

extern "C" void forward_stop(int sig) {
  stop_requested = 1;
  if (child_pid > 0) ::kill(static_cast<pid_t>(child_pid), sig);
}

struct started_head {
  pid_t pid = -1;
  std::string ready;  // empty: it ended before it was ready
};

started_head start_head(std::vector<std::string> argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  argv.push_back("--ready-fd");
  argv.push_back(std::to_string(fds[1]));
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // The head shares the watchdog's log (stdout, stderr) and session.
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    int flags = ::fcntl(fds[1], F_GETFD);
    ::fcntl(fds[1], F_SETFD, flags & ~FD_CLOEXEC);
    ::execv(cargv[0], cargv.data());
    ::dprintf(2, "exec %s failed: %s\n", cargv[0], std::strerror(errno));
    ::_exit(127);
  }
  child_pid = pid;
  ::close(fds[1]);
  started_head out{pid, {}};
  std::string line;
  char buf[256];
  for (;;) {
    auto n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    line.append(buf, static_cast<std::size_t>(n));
    if (auto pos = line.find('\n'); pos != std::string::npos) {
      out.ready = line.substr(0, pos);
      break;
    }
  }
  ::close(fds[0]);
  return out;
}

int wait_head(pid_t pid, int& status) {
  for (;;) {
    if (::waitpid(pid, &status, 0) == pid) return 0;
    if (errno != EINTR) return -1;
  }
}

std::string how_it_ended(int status) {
  if (WIFSIGNALED(status)) return std::string("killed by ") + strsignal(WTERMSIG(status));
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

// `down`, status and tests find the head through the state file: point it at the new one.
void record_head(const std::string& dir, pid_t pid) {
  if (dir.empty() || !std::filesystem::exists(state_file(dir))) return;
  try {
    auto st = load_state(dir);
    auto identity = read_identity(pid);
    if (!identity) return;
    for (auto& p : st.processes)
      if (p.role == "head") {
        p.pid = pid;
        p.identity = *identity;
      }
    save_state(dir, st);
  } catch (const std::exception& e) {
    log_line("watchdog", std::string("cannot record the new head in the state file: ") + e.what());
  }
}

}  // namespace

int run_head_watchdog(const watchdog_options& opts) {
  struct sigaction sa{};
  sa.sa_handler = forward_stop;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  // up's readiness pipe is the watchdog's to answer, not something the head should inherit.
  if (opts.ready_fd >= 0) ::fcntl(opts.ready_fd, F_SETFD, FD_CLOEXEC);
  std::deque<std::chrono::steady_clock::time_point> restarts;
  bool first = true;
  for (;;) {
    auto argv = opts.head_argv;
    if (!first && std::find(argv.begin(), argv.end(), "--recover") == argv.end()) argv.push_back("--recover");
    auto head = start_head(argv);
    if (!head.ready.empty()) {
      if (first) {
        signal_ready(opts.ready_fd, head.ready + " head-pid " + std::to_string(head.pid));
      } else {
        record_head(opts.state_dir, head.pid);
        log_line("watchdog", "head restarted with --recover as pid " + std::to_string(head.pid) + " (" + head.ready + ")");
      }
    }
    int status = 0;
    if (wait_head(head.pid, status) != 0) {
      log_line("watchdog", std::string("lost track of the head: ") + std::strerror(errno));
      return 1;
    }
    child_pid = 0;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (stop_requested) return WIFEXITED(status) ? code : 0;
    if (WIFEXITED(status) && code == 0) return 0;  // a requested shutdown
    if (first && head.ready.empty()) return code;  // it never came up: a configuration problem
    auto now = std::chrono::steady_clock::now();
    while (!restarts.empty() && now - restarts.front() > std::chrono::seconds(watchdog_window_s)) restarts.pop_front();
    if (static_cast<int>(restarts.size()) >= watchdog_max_restarts) {
      log_line("watchdog", "the head " + how_it_ended(status) + "; it was restarted " +
                               std::to_string(restarts.size()) + " times in " + std::to_string(watchdog_window_s) +
                               " s, giving up");
      return code;
    }
    restarts.push_back(now);
    log_line("watchdog", "the head (pid " + std::to_string(head.pid) + ") " + how_it_ended(status) +
                             "; restarting it with --recover");
    first = false;
  }
}

}  // namespace dls::runtime
