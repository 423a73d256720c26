#pragma once
// Helpers for the HTTP tests: a live cluster with its gateway, and the real clients
// users point at it (curl, the openai npm package, promtool), run as processes.
#include "../runtime/cluster_fixture.hpp"

#include <map>
#include <string>
#include <vector>

namespace dls::test {

struct http_reply {
  int status = 0;  // 0: curl itself failed (see body)
  std::string body;
  std::string headers;
};

/// Runs a program to completion; returns its exit status, stdout+stderr in `output`.
int run_program(const std::vector<std::string>& argv, std::string& output);

/// Starts a program in the background with its output to `log`; returns its pid.
int start_program(const std::vector<std::string>& argv, const std::string& log);
/// Kills it (SIGKILL) and reaps it.
void kill_program(int pid);

/// The development key of configs/local-api-keys.
std::string api_key();

/// A cluster from configs/local.yaml with its HTTP gateway on a free port.
class http_cluster {
 public:
  /// `http` changes keys of the http section; `overrides` replaces other top-level sections.
  explicit http_cluster(const std::map<std::string, std::string>& http = {}, int dead_after_ms = 0,
                        const std::string& overrides = "");
  const cluster& nodes() const { return cluster_; }
  std::string url(const std::string& path) const;  // http://127.0.0.1:PORT + path
  /// curl METHOD path [with the key] [JSON body]; extra curl flags may follow.
  http_reply call(const std::string& method, const std::string& path, const std::string& body = "",
                  bool with_key = true, const std::vector<std::string>& extra = {}) const;
  nlohmann::json status() const;  // GET /v1/cluster

 private:
  cluster cluster_;
  int port_ = 0;
};

/// The first `n` eval problems with their reference answers, as the node script reads them.
std::string write_expected(const scratch_dir& dir, std::size_t n);

}  // namespace dls::test
