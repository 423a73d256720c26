#pragma once
// How a client command finds the cluster: the state directory `up` wrote, or an explicit
// head address with a token file. Shared by status, actors, submit and reconfigure.
#include "runtime/client.hpp"

#include <CLI/CLI.hpp>

#include <string>

namespace dls::cli {

struct cluster_flags {
  std::string state_dir, address, token_file, tls_dir;
  bool insecure = false;

  void add_to(CLI::App* sub) {
    sub->add_option("--state-dir", state_dir, "State directory (default $DILASERVE_STATE_DIR or ~/.dilaserve)");
    sub->add_option("--address", address, "HOST:PORT of the head (instead of the state directory)");
    sub->add_option("--token-file", token_file, "File holding the cluster token");
    sub->add_option("--tls-dir", tls_dir, "Directory with the cluster's CA and certificates (with --address)");
    sub->add_flag("--insecure", insecure, "Plain TCP, for a cluster whose file says auth.insecure: true");
  }

  runtime::cluster_address find() const {
    return runtime::find_cluster(state_dir, address, token_file, tls_dir, insecure);
  }
};

}  // namespace dls::cli
