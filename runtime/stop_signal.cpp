#include "runtime/stop_signal.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace dls::runtime {

stop_signal::stop_signal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal_fd_ = ::signalfd(-1, &set, SFD_CLOEXEC);
  event_fd_ = ::eventfd(0, EFD_CLOEXEC);
  ::signal(SIGPIPE, SIG_IGN);
}

stop_signal::~stop_signal() {
  if (signal_fd_ >= 0) ::close(signal_fd_);
  if (event_fd_ >= 0) ::close(event_fd_);
}

void stop_signal::notify(int exit_code) {
  int expected = -1;
  code_.compare_exchange_strong(expected, exit_code);
  uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(event_fd_, &one, sizeof(one));
}

int stop_signal::wait() {
  pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {event_fd_, POLLIN, 0}};
  while (::poll(fds, 2, -1) < 0 && errno == EINTR) {
  }
  if (fds[0].revents & POLLIN) notify(0);
  int code = code_.load();
  return code < 0 ? 0 : code;
}

}  // namespace dls::runtime
