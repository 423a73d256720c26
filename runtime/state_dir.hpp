#pragma once
// What `dilaserve up` started, so that later commands (status, submit, down) find the
// cluster without being told where it is. One JSON file per state directory.
#include "runtime/process.hpp"

#include <string>
#include <vector>

namespace dls::runtime {

struct process_record {
  std::string role;  // head | node
  std::string name;
  int pid = 0;
  std::string log;
  process_identity identity;  // `down` signals the pid only while it still matches
};

struct cluster_state {
  std::string cluster;
  std::string config_file;
  std::string head_host;
  int head_port = 0;
  std::string http_host;  // the head's HTTP gateway, when the config enables one
  int http_port = 0;      // 0: no gateway
  std::string token_file;  // a copy of the token, mode 0600, inside the state directory
  std::string tls_dir;     // the cluster's CA and certificates; empty with insecure
  bool insecure = false;   // plain TCP (auth.insecure: true)
  std::vector<process_record> processes;
};

/// `flag` if set, else $DILASERVE_STATE_DIR, else ~/.dilaserve.
std::string resolve_state_dir(const std::string& flag);

/// Path of the state file inside `dir`.
std::string state_file(const std::string& dir);

void save_state(const std::string& dir, const cluster_state& st);

/// Throws std::runtime_error("no cluster recorded in DIR; run `dilaserve up FILE`...").
cluster_state load_state(const std::string& dir);

/// Reads the first line of a token file; throws std::runtime_error on failure.
std::string read_token(const std::string& path);

/// Writes `token` to `path` readable by the owner only.
void write_token(const std::string& path, const std::string& token);

/// Compares without an early exit, so timing does not reveal a prefix.
bool tokens_equal(const std::string& a, const std::string& b);

/// Splits "HOST:PORT"; throws std::runtime_error on malformed input.
std::pair<std::string, int> split_address(const std::string& address);

}  // namespace dls::runtime
