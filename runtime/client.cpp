#include "runtime/client.hpp"

#include "runtime/state_dir.hpp"

#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>
#include <filesystem>
#include <optional>
#include <stdexcept>

namespace fs = std::filesystem;

namespace dls::runtime {

namespace {

// How long a client waits for the gate's answer to its hello in all: what a busy head on a
// shared machine needs, as before the hello was re-sent.
constexpr auto client_hello_budget = std::chrono::seconds(10);
// How long before the hello is sent again: hellos reached the gate within 0.1 s with the head
// sharing two cores with two clusters and two busy loops, so 2 s is twenty times that.
constexpr std::chrono::milliseconds hello_resend{2000};

// The CLI presents the admin certificate where the directory holds it, else the client one
// (a machine given only client.pem and a submit token).
transport_security cli_security(const std::string& dir) {
  auto role = fs::exists(fs::path(dir) / "admin.pem") ? "admin" : "client";
  return {true, dir, role};
}

}  // namespace

cluster_address address_of(const cluster_state& st) {
  cluster_address out;
  out.host = st.head_host;
  out.port = st.head_port;
  out.token = read_token(st.token_file);
  out.security = st.insecure ? transport_security::insecure() : cli_security(st.tls_dir);
  return out;
}

cluster_address find_cluster(const std::string& state_dir_flag, const std::string& address,
                             const std::string& token_file, const std::string& tls_dir, bool insecure) {
  if (address.empty()) {
    auto out = address_of(load_state(resolve_state_dir(state_dir_flag)));
    if (!token_file.empty()) out.token = read_token(token_file);
    if (!tls_dir.empty()) out.security = cli_security(tls_dir);
    if (insecure) out.security = transport_security::insecure();
    return out;
  }
  cluster_address out;
  auto [host, port] = split_address(address);
  out.host = host;
  out.port = port;
  // An address alone still works when the state directory holds the token and certificates.
  std::optional<cluster_state> st;
  auto state = [&]() -> const cluster_state& {
    if (!st) st = load_state(resolve_state_dir(state_dir_flag));
    return *st;
  };
  out.token = read_token(token_file.empty() ? state().token_file : token_file);
  if (insecure)
    out.security = transport_security::insecure();
  else if (!tls_dir.empty())
    out.security = cli_security(tls_dir);
  else if (!token_file.empty() && !fs::exists(state_file(resolve_state_dir(state_dir_flag))))
    throw std::runtime_error("--address " + address +
                             " needs --tls-dir DIR (the cluster's certificates, made by `dilaserve certs`), or "
                             "--insecure for a cluster whose file says auth.insecure: true");
  else
    out.security = state().insecure ? transport_security::insecure() : cli_security(state().tls_dir);
  return out;
}

head_actor connect_head(caf::actor_system& sys, const cluster_address& where) {
  auto where_str = where.host + ":" + std::to_string(where.port);
  auto gate = connect_gate(sys, where.host, static_cast<uint16_t>(where.port), where.security);
  if (!gate) {
    auto why = sys.render(gate.error());
    if (why.find("disconnect_during_handshake") != std::string::npos)
      why += where.security.tls ? "; TLS handshake refused: is this the cluster's CA (" + where.security.dir +
                                      ")? A head started with auth.insecure: true needs --insecure"
                                : "; the head may require TLS: drop --insecure and give --tls-dir";
    throw std::runtime_error("cannot reach the head at " + where_str + " (" + why + ")");
  }
  // A head too busy to answer within hello_resend gets the hello again until
  // client_hello_budget is spent; the gate's answer to a repeated hello is the same, and a late
  // answer to an earlier one is left unread. (The unanswered hellos once seen under load were
  // CAF 0.17.6 erasing a new connection's route; runtime/fresh_accept.cpp keeps that from
  // happening, and resending could not have helped it.)
  caf::scoped_actor self{sys};
  head_actor head;
  std::string failure;
  const auto deadline = std::chrono::steady_clock::now() + client_hello_budget;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    bool timed_out = false;
    failure.clear();
    self->request(*gate, std::min<std::chrono::milliseconds>(hello_resend, left), client_atom::value, where.token)
        .receive(
            [&](const client_reply& r) {
              if (r.ok)
                head = r.head;
              else
                failure = "the head at " + where_str + " refused this client: " + r.error;
            },
            [&](const caf::error& e) {
              timed_out = e == caf::sec::request_timeout;
              failure = "the head at " + where_str + " did not answer (" + sys.render(e) + ")";
            });
    if (!timed_out || std::chrono::steady_clock::now() >= deadline) break;
  }
  if (!failure.empty()) throw std::runtime_error(failure);
  return head;
}

}  // namespace dls::runtime

#include "runtime/caf_setup.hpp"

namespace dls::runtime {

cluster_session::cluster_session(const cluster_address& where) : where_(where) {
  cfg_ = std::make_unique<caf::actor_system_config>();
  configure_networked_caf(*cfg_, {"--scheduler.max-threads=1"}, where_.security);
  sys_ = std::make_unique<caf::actor_system>(*cfg_);
  head_ = connect_head(*sys_, where_);
}

cluster_session::~cluster_session() {
  head_ = nullptr;  // no handle may outlive the actor system
  sys_.reset();
}

}  // namespace dls::runtime
