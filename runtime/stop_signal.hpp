#pragma once
// How a head or node process waits for its end: SIGINT/SIGTERM, or an actor asking to
// stop (shutdown command, lost head). Both write to one eventfd, so the main thread
// sleeps in poll until one of them fires.
#include <atomic>
#include <chrono>
#include <optional>

namespace dls::runtime {

class stop_signal {
 public:
  /// Installs SIGINT/SIGTERM handlers (one stop_signal per process).
  stop_signal();
  ~stop_signal();
  stop_signal(const stop_signal&) = delete;
  stop_signal& operator=(const stop_signal&) = delete;

  /// Thread-safe; the first code wins.
  void notify(int exit_code);

  /// Returns the exit code (0 after a signal).
  int wait();

  /// Like wait(), but gives up after `timeout` and returns nothing.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);

  /// Forgets a notification that has been handled (a node that lost its head and runs on);
  /// a signal received stays.
  void reset();

 private:
  int event_fd_ = -1;
  std::atomic<int> code_{-1};
};

}  // namespace dls::runtime
