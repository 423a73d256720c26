#pragma once
// Starting and stopping cluster processes from the CLI. Readiness is reported by the
// child over a pipe (it writes one line once it serves), so `up` waits on an event
// rather than polling or sleeping; exits are awaited through pidfds.
#include <string>
#include <vector>

namespace dls::runtime {

struct spawned_process {
  int pid = 0;
  int ready_fd = -1;  // read end; the child got the write end as --ready-fd
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

/// The running executable (for re-launching this binary as head or node).
std::string self_executable();

}  // namespace dls::runtime
