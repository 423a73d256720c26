#pragma once
// Starting and stopping cluster processes from the CLI. Readiness is reported by the
// child over a pipe (it writes one line once it serves), so `up` waits on an event
// rather than polling or sleeping; exits are awaited through pidfds.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dls::runtime {

/// What tells a process apart from a later one that reuses its id: when it started (clock
/// ticks after boot, /proc/PID/stat field 22), in which boot, and its command line.
struct process_identity {
  uint64_t start_ticks = 0;  // 0: not recorded
  std::string boot_id;
  std::vector<std::string> cmdline;
};

struct spawned_process {
  int pid = 0;
  int ready_fd = -1;  // read end; the child got the write end as --ready-fd
  process_identity identity;  // the start time read after fork, the command line it execs
};

/// Starts `argv` in its own session with stdout/stderr appended to `log_path`.
/// The child receives "--ready-fd N" appended to its arguments.
spawned_process spawn_background(std::vector<std::string> argv, const std::string& log_path);

/// Waits up to `timeout_ms` for the child's ready line. Returns it, or throws
/// std::runtime_error naming what happened (exited, timed out).
std::string wait_ready(const spawned_process& p, int timeout_ms);

/// Writes `line` to the inherited ready pipe and closes it (child side; no-op for fd < 0).
void signal_ready(int fd, const std::string& line);

/// Waits until `pid` (any process, not only a child) has exited. Returns false on timeout.
bool wait_exit(int pid, int timeout_ms);

/// True while `pid` exists and is not a zombie.
bool process_alive(int pid);

/// Reads `pid`'s identity from /proc; nothing when it does not exist.
std::optional<process_identity> read_identity(int pid);

enum class signal_result { sent, exited, other_process };

struct signal_outcome {
  signal_result result = signal_result::exited;
  std::string why;  // for other_process: what differs
};

/// Sends `sig` (0: only checks) to `pid` only while it is the process `recorded` describes.
/// The process is pinned through a pidfd while it is checked, so the signal cannot reach a
/// process that took over the id in between.
signal_outcome signal_if_same(int pid, const process_identity& recorded, int sig);

/// The running executable (for re-launching this binary as head or node).
std::string self_executable();

}  // namespace dls::runtime
