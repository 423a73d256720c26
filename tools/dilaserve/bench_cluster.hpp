#pragma once
// A cluster the bench starts itself (`dilaserve up` in a child process) and always stops
// (`dilaserve down`), also after an error or an interrupt; plus the interrupt flag the bench's
// waits check.
#include <string>

namespace dls::cli {

/// SIGINT and SIGTERM set a flag instead of ending the process, so that whatever the bench
/// started is stopped before it exits. Idempotent.
void catch_interrupts();
bool interrupted();
/// Throws std::runtime_error("interrupted") once a signal came.
void throw_if_interrupted();

class owned_cluster {
 public:
  /// Runs `dilaserve up FILE --state-dir DIR [--slo-scale S]` (S > 0; else the file's own
  /// scheduler.slo_scale) and waits for it (up's own timeout bounds the wait); its output goes to DIR/bench-up.log. Throws with up's last
  /// line of error output when it fails; whatever it started is stopped first.
  owned_cluster(const std::string& config, const std::string& state_dir, double slo_scale);
  ~owned_cluster();  // stop(), errors reported on stderr
  owned_cluster(const owned_cluster&) = delete;
  owned_cluster& operator=(const owned_cluster&) = delete;

  const std::string& state_dir() const { return state_dir_; }
  /// `dilaserve down`, then checks that no recorded process is still alive. Throws naming
  /// any that is. Safe to call twice.
  void stop();

 private:
  std::string state_dir_;
  bool running_ = false;
};

}  // namespace dls::cli
