#include "runtime/stop_signal.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace dls::runtime {

namespace {

// Library threads that exist before main (OpenBLAS starts its pool at load time) do not
// have the signals blocked, so a handler, not sigwait/signalfd, catches them; it only
// does the async-signal-safe write to the eventfd.
int g_signal_event_fd = -1;
volatile sig_atomic_t g_signalled = 0;

extern "C" void on_stop_signal(int) {
  g_signalled = 1;
  uint64_t one = 1;
  if (g_signal_event_fd >= 0) {
    [[maybe_unused]] auto n = ::write(g_signal_event_fd, &one, sizeof(one));
  }
}

}  // namespace

stop_signal::stop_signal() {
  event_fd_ = ::eventfd(0, EFD_CLOEXEC);
  g_signal_event_fd = event_fd_;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

stop_signal::~stop_signal() {
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  g_signal_event_fd = -1;
  if (event_fd_ >= 0) ::close(event_fd_);
}

void stop_signal::notify(int exit_code) {
  int expected = -1;
  code_.compare_exchange_strong(expected, exit_code);
  uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(event_fd_, &one, sizeof(one));
}

int stop_signal::wait() {
  pollfd fd{event_fd_, POLLIN, 0};
  while (::poll(&fd, 1, -1) < 0 && errno == EINTR) {
  }
  if (g_signalled) notify(0);
  int code = code_.load();
  return code < 0 ? 0 : code;
}

std::optional<int> stop_signal::wait_for(std::chrono::milliseconds timeout) {
  pollfd fd{event_fd_, POLLIN, 0};
  int rc;
  while ((rc = ::poll(&fd, 1, static_cast<int>(timeout.count()))) < 0 && errno == EINTR) {
  }
  if (g_signalled) notify(0);
  if (rc == 0 && !g_signalled) return std::nullopt;
  int code = code_.load();
  return code < 0 ? 0 : code;
}

void stop_signal::reset() {
  if (g_signalled) return;
  uint64_t count = 0;
  pollfd fd{event_fd_, POLLIN, 0};
  if (::poll(&fd, 1, 0) > 0) {
    [[maybe_unused]] auto n = ::read(event_fd_, &count, sizeof(count));
  }
  code_.store(-1);
}

}  // namespace dls::runtime
