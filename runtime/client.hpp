#pragma once
// How a CLI command or an embedding program reaches a running cluster: connect to the
// head's gate, present the token, and get the head endpoint back.
#include "runtime/messages.hpp"
#include "runtime/state_dir.hpp"
#include "runtime/transport.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace dls::runtime {

struct cluster_address {
  std::string host;
  int port = 0;
  std::string token;
  transport_security security;  // TLS by default; the CLI presents the `admin` certificate
};

/// The head recorded in a state directory, with its token and transport.
cluster_address address_of(const cluster_state& st);

/// Finds the cluster: `address` ("HOST:PORT") with `token_file` and `tls_dir` if given, else
/// the state directory (see resolve_state_dir). `insecure` connects over plain TCP (for a
/// cluster whose file says `auth.insecure: true`). Throws std::runtime_error with a one-line
/// message when neither works.
cluster_address find_cluster(const std::string& state_dir_flag, const std::string& address,
                             const std::string& token_file, const std::string& tls_dir = "",
                             bool insecure = false);

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
  /// Connects and authenticates again (a restarted head at the same address); throws
  /// std::runtime_error with a one-line message.
  void reconnect() { head_ = connect_head(*sys_, where_); }
  const cluster_address& address() const { return where_; }
  /// The token this session authenticated with: admin calls (regroup, shutdown) carry it.
  const std::string& credential() const { return where_.token; }
  /// Sends `xs...` to the head and waits up to `timeout` for its text answer (the JSON the
  /// admin calls reply); throws std::runtime_error("WHAT failed: ...") when none comes.
  template <class Duration, class... Ts>
  std::string ask_text(const std::string& what, Duration timeout, Ts&&... xs) {
    caf::scoped_actor self{*sys_};
    std::string text, failure;
    self->request(head_, timeout, std::forward<Ts>(xs)...)
        .receive([&](std::string& s) { text = std::move(s); },
                 [&](const caf::error& e) { failure = sys_->render(e); });
    if (!failure.empty()) throw std::runtime_error(what + " failed: " + failure);
    return text;
  }

 private:
  cluster_address where_;
  std::unique_ptr<caf::actor_system_config> cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  head_actor head_;
};

}  // namespace dls::runtime
