#pragma once
// A backlog on a paused two-node cluster: both nodes are stopped (SIGSTOP) while the prompts are
// submitted at τ = 1, so every request waits in a queue and an order given now (a migration)
// reaches its group before any request has taken a step. The nodes go on at resume(), at
// wait(), or when this ends, so a failing check never leaves them stopped.
#include "cluster_fixture.hpp"
#include "session_probe.hpp"

#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dls::test {

class paused_backlog {
 public:
  /// Returns once `n` requests are in the directory, or after 60 s (then queued() is false).
  paused_backlog(const cluster& c, runtime::cluster_session& s, const std::string& prompts, std::size_t n)
      : pids_{c.pid_of("node0"), c.pid_of("node1")} {
    for (int pid : pids_) ::kill(pid, SIGSTOP);
    submit_.emplace(c.cli_background(
        {"submit", "--file", prompts, "--threshold", "1", "--rate", "1000", "--json", "--timeout", "180"}));
    queued_ = eventually(60, [&] { return request_rows(s).size() >= n; });
  }
  ~paused_backlog() { resume(); }
  paused_backlog(const paused_backlog&) = delete;
  paused_backlog& operator=(const paused_backlog&) = delete;

  bool queued() const { return queued_; }
  void resume() {
    for (int pid : pids_) ::kill(pid, SIGCONT);
  }
  /// Resumes the nodes and collects the submit's output (`--json`).
  cli_result wait() {
    resume();
    return submit_->wait();
  }

 private:
  int pids_[2];
  std::optional<background_cli> submit_;
  bool queued_ = false;
};

/// Where each request in the directory runs, by group name: an order to no group is refused
/// naming the request's group, and moves nothing.
inline std::map<std::string, std::vector<uint64_t>> placements(runtime::cluster_session& s) {
  std::map<std::string, std::vector<uint64_t>> out;
  for (const auto& [id, row] : request_rows(s)) out[migrate_request(s, id, "", "any").value("from", "")].push_back(id);
  return out;
}

}  // namespace dls::test
