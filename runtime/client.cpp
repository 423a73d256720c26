#include "runtime/client.hpp"

#include "runtime/state_dir.hpp"

#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>
#include <stdexcept>

namespace dls::runtime {

cluster_address find_cluster(const std::string& state_dir_flag, const std::string& address,
                             const std::string& token_file) {
  cluster_address out;
  if (!address.empty()) {
    auto [host, port] = split_address(address);
    out.host = host;
    out.port = port;
    if (!token_file.empty()) {
      out.token = read_token(token_file);
    } else {
      // An address alone still works when the state directory holds the token.
      auto st = load_state(resolve_state_dir(state_dir_flag));
      out.token = read_token(st.token_file);
    }
    return out;
  }
  auto st = load_state(resolve_state_dir(state_dir_flag));
  out.host = st.head_host;
  out.port = st.head_port;
  out.token = read_token(token_file.empty() ? st.token_file : token_file);
  return out;
}

head_actor connect_head(caf::actor_system& sys, const cluster_address& where) {
  auto where_str = where.host + ":" + std::to_string(where.port);
  auto gate = sys.middleman().remote_actor<gate_actor>(where.host, static_cast<uint16_t>(where.port));
  if (!gate)
    throw std::runtime_error("cannot reach the head at " + where_str + " (" + sys.render(gate.error()) + ")");
  caf::scoped_actor self{sys};
  head_actor head;
  std::string failure;
  self->request(*gate, std::chrono::seconds(10), client_atom::value, where.token)
      .receive(
          [&](const client_reply& r) {
            if (r.ok)
              head = r.head;
            else
              failure = "the head at " + where_str + " refused this client: " + r.error;
          },
          [&](const caf::error& e) {
            failure = "the head at " + where_str + " did not answer (" + sys.render(e) + ")";
          });
  if (!failure.empty()) throw std::runtime_error(failure);
  return head;
}

}  // namespace dls::runtime

#include "runtime/caf_setup.hpp"

namespace dls::runtime {

cluster_session::cluster_session(const cluster_address& where) : where_(where) {
  cfg_ = std::make_unique<caf::actor_system_config>();
  configure_caf(*cfg_, {"--scheduler.max-threads=1"});
  sys_ = std::make_unique<caf::actor_system>(*cfg_);
  head_ = connect_head(*sys_, where_);
}

cluster_session::~cluster_session() {
  head_ = nullptr;  // no handle may outlive the actor system
  sys_.reset();
}

}  // namespace dls::runtime
