#pragma once
// The two kinds of cluster process. `dilaserve start` calls these; so can an embedding
// program that wants to host a head or a node inside its own binary.
#include "runtime/cluster_config.hpp"
#include "runtime/transport.hpp"

#include <string>
#include <vector>

namespace dls::actors {

struct head_options {
  int ready_fd = -1;  // receives "port N" once the gate is published
  runtime::transport_security security;  // the head presents the `head` certificate
  std::string state_dir;  // holds the write-ahead log head.wal; empty: nothing is persisted
  bool recover = false;   // carry on from the log (same port, requests, incarnations, layouts)
};

/// Runs a head until a client asks it to shut down or it gets SIGINT/SIGTERM.
/// Returns the process exit status.
int run_head(const runtime::cluster_config& cfg, const head_options& opts);

struct node_options {
  std::string host;
  int port = 0;
  std::string token;
  std::string node;
  std::vector<std::string> caf_args;
  int ready_fd = -1;  // receives "joined CLUSTER" once registered
  runtime::transport_security security;  // the node presents the `node` certificate
};

/// Joins the head at host:port as `node` and serves until told to stop, the head is
/// lost, or a signal arrives. Returns the process exit status (2: refused).
int run_node(const node_options& opts);

}  // namespace dls::actors
