#include "runtime/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

namespace dls::runtime {

spawned_process spawn_background(std::vector<std::string> argv, const std::string& log_path) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  // The child keeps the write end under a fixed number and the parent keeps the read end.
  argv.push_back("--ready-fd");
  argv.push_back(std::to_string(fds[1]));
  int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) throw std::runtime_error("cannot open log " + log_path + ": " + std::strerror(errno));
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::setsid();  // survives the CLI's terminal and is not hit by its Ctrl-C
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    int flags = ::fcntl(fds[1], F_GETFD);
    ::fcntl(fds[1], F_SETFD, flags & ~FD_CLOEXEC);
    // Nothing else of the caller's travels into a daemon: an inherited descriptor (a flock
    // on a build lock, a test's pipe) would otherwise stay held for the cluster's lifetime.
    if (fds[1] > 3) ::close_range(3, static_cast<unsigned>(fds[1] - 1), 0);
    ::close_range(static_cast<unsigned>(fds[1] + 1), ~0U, 0);
    ::execv(cargv[0], cargv.data());
    ::dprintf(2, "exec %s failed: %s\n", cargv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(log);
  ::close(fds[1]);
  spawned_process out{pid, fds[0], {}};
  // The start time is fixed at fork; /proc may still show our own command line until the
  // child's exec, so the command line recorded is the one it execs.
  if (auto id = read_identity(pid)) out.identity = *id;
  out.identity.cmdline = argv;
  return out;
}

std::string wait_ready(const spawned_process& p, int timeout_ms) {
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) throw std::runtime_error("did not become ready within " + std::to_string(timeout_ms / 1000) + " s");
    pollfd pfd{p.ready_fd, POLLIN, 0};
    int rc = ::poll(&pfd, 1, static_cast<int>(left));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char buf[256];
    auto n = ::read(p.ready_fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int status = 0;
      // Reap it if it is our child, to report how it ended.
      if (::waitpid(p.pid, &status, WNOHANG) == p.pid) {
        if (WIFEXITED(status)) throw std::runtime_error("exited with status " + std::to_string(WEXITSTATUS(status)));
        if (WIFSIGNALED(status)) throw std::runtime_error(std::string("killed by signal ") + strsignal(WTERMSIG(status)));
      }
      throw std::runtime_error("exited before it was ready");
    }
    line.append(buf, static_cast<std::size_t>(n));
    if (auto pos = line.find('\n'); pos != std::string::npos) return line.substr(0, pos);
  }
}

void signal_ready(int fd, const std::string& line) {
  if (fd < 0) return;
  auto text = line + "\n";
  [[maybe_unused]] auto n = ::write(fd, text.data(), text.size());
  ::close(fd);
}

bool process_alive(int pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(stat, s);
  auto pos = s.rfind(')');
  return !(pos != std::string::npos && pos + 2 < s.size() && s[pos + 2] == 'Z');
}

bool wait_exit(int pid, int timeout_ms) {
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) == pid) return true;  // our own child
  int pfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pfd < 0) return !process_alive(pid);
  pollfd p{pfd, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&p, 1, timeout_ms);
  } while (rc < 0 && errno == EINTR);
  ::close(pfd);
  if (rc > 0) ::waitpid(pid, &status, WNOHANG);
  return rc > 0;
}

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Field 22 of /proc/PID/stat; the command name (field 2) may hold spaces and parentheses,
// so fields are counted after its last ')'.
uint64_t start_ticks_of(const std::string& stat) {
  auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int n = 3; rest >> field; ++n)
    if (n == 22) return std::strtoull(field.c_str(), nullptr, 10);
  return 0;
}

std::string describe(const std::vector<std::string>& cmdline) {
  std::string s;
  for (const auto& a : cmdline) s += (s.empty() ? "" : " ") + a;
  constexpr std::size_t shown = 80;  // characters of a command line in a message
  return s.size() > shown ? s.substr(0, shown) + "..." : s;
}

}  // namespace

std::optional<process_identity> read_identity(int pid) {
  if (pid <= 0) return std::nullopt;
  auto dir = "/proc/" + std::to_string(pid);
  auto stat = read_text(dir + "/stat");
  if (stat.empty()) return std::nullopt;
  process_identity id;
  id.start_ticks = start_ticks_of(stat);
  id.boot_id = read_text("/proc/sys/kernel/random/boot_id");
  while (!id.boot_id.empty() && id.boot_id.back() == '\n') id.boot_id.pop_back();
  auto cmd = read_text(dir + "/cmdline");
  for (std::size_t pos = 0; pos < cmd.size();) {
    auto end = cmd.find('\0', pos);
    if (end == std::string::npos) end = cmd.size();
    id.cmdline.push_back(cmd.substr(pos, end - pos));
    pos = end + 1;
  }
  return id;
}

signal_outcome signal_if_same(int pid, const process_identity& recorded, int sig) {
  signal_outcome out;
  if (recorded.start_ticks == 0) {
    out.result = signal_result::other_process;
    out.why = "the state file records no start time for it, so it may be another process";
    return out;
  }
  int pfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pfd < 0) return out;  // exited
  auto now = read_identity(pid);
  // Only while the pinned process is alive does /proc/PID describe it. A zombie, or a
  // process so far into its exit that its command line is gone, has nothing left to stop.
  bool alive = ::syscall(SYS_pidfd_send_signal, pfd, 0, nullptr, 0) == 0 && process_alive(pid);
  if (!now || !alive || now->cmdline.empty()) {
    ::close(pfd);
    return out;
  }
  out.result = signal_result::other_process;
  if (!recorded.boot_id.empty() && now->boot_id != recorded.boot_id)
    out.why = "it was recorded in an earlier boot";
  else if (now->start_ticks != recorded.start_ticks)
    out.why = "it started at tick " + std::to_string(now->start_ticks) + ", not at the recorded " +
              std::to_string(recorded.start_ticks);
  else if (now->cmdline != recorded.cmdline)
    out.why = "its command line is '" + describe(now->cmdline) + "', not the recorded '" +
              describe(recorded.cmdline) + "'";
  else if (sig == 0 || ::syscall(SYS_pidfd_send_signal, pfd, sig, nullptr, 0) == 0)
    out.result = signal_result::sent;
  else
    out.result = signal_result::exited;
  ::close(pfd);
  return out;
}

std::string self_executable() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot resolve /proc/self/exe");
  return std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace dls::runtime
