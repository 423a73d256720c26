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
#include <fstream>
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
    ::execv(cargv[0], cargv.data());
    ::dprintf(2, "exec %s failed: %s\n", cargv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(log);
  ::close(fds[1]);
  return {pid, fds[0]};
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

std::string self_executable() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot resolve /proc/self/exe");
  return std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace dls::runtime
