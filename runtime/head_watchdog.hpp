#pragma once
// The small parent `up` starts the head under (`dilaserve start --head --supervise`): it runs
// the head as its child and, when the head ends abnormally (killed by a signal, or a non-zero
// status), starts it again with --recover, which carries on from the write-ahead log on the
// same port. It holds no CAF system and no cluster state, so there is little in it to fail.
#include <string>
#include <vector>

namespace dls::runtime {

struct watchdog_options {
  std::vector<std::string> head_argv;  // the head's command line, without --ready-fd
  int ready_fd = -1;       // receives the first head's ready line, plus " head-pid PID"
  std::string state_dir;   // its state.json head record follows each restart (when present)
};

/// Restarts at most this many times in `watchdog_window_s`, then gives up with the head's
/// status: a head that cannot come up (a bad disk, a port taken by another program) should
/// fail visibly rather than loop.
constexpr int watchdog_max_restarts = 5;
constexpr int watchdog_window_s = 60;

/// Runs until the head ends cleanly (status 0: `down`), SIGTERM/SIGINT (forwarded to the
/// head), or the restart limit. Returns the exit status to end with.
int run_head_watchdog(const watchdog_options& opts);

}  // namespace dls::runtime
