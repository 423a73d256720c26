#pragma once
// How a CLI command or an embedding program reaches a running cluster: connect to the
// head's gate, present the token, and get the head endpoint back.
#include "runtime/messages.hpp"

#include <caf/actor_system.hpp>

#include <memory>
#include <string>

namespace dls::runtime {

struct cluster_address {
  std::string host;
  int port = 0;
  std::string token;
};

/// Finds the cluster: `address` ("HOST:PORT") with `token_file` if given, else the
/// state directory (see resolve_state_dir). Throws std::runtime_error with a one-line
/// message when neither works.
cluster_address find_cluster(const std::string& state_dir_flag, const std::string& address,
                             const std::string& token_file);

/// Connects and authenticates. Throws std::runtime_error: "cannot reach the head at
/// H:P (...)" or "the head at H:P refused this client: invalid cluster token".
head_actor connect_head(caf::actor_system& sys, const cluster_address& where);

}  // namespace dls::runtime

namespace dls::runtime {

/// A CLI-side connection: its own small actor system plus the authenticated head.
class cluster_session {
 public:
  /// Connects; throws std::runtime_error with a one-line message.
  explicit cluster_session(const cluster_address& where);
  ~cluster_session();
  caf::actor_system& system() { return *sys_; }
  const head_actor& head() const { return head_; }
  const cluster_address& address() const { return where_; }

 private:
  cluster_address where_;
  std::unique_ptr<caf::actor_system_config> cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  head_actor head_;
};

}  // namespace dls::runtime
