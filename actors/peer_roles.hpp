#pragma once
// Which remote CAF nodes proved which role to the gate. CAF 0.17's BASP delivers a message to
// any actor id that a peer names, so every actor that takes control messages checks that the
// sender is local or a node that showed the right credential; a peer that never did gets
// nothing, whatever id it guesses.
//
// Limits (docs/runtime.md, "Security"): BASP does not bind a message's source node to the
// connection it came on, so a peer that forges the source node id of an authenticated peer
// passes this check. That is why every connection runs mutual TLS by default: without a
// certificate of the cluster's CA no byte reaches BASP. Admin operations also carry the admin
// token in the message itself, which a forged node id does not give.
#include <caf/fwd.hpp>
#include <caf/node_id.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace dls::actors {

/// Bit set of what a peer may do.
enum peer_role : std::uint8_t {
  role_none = 0,
  role_client = 1,  // submit, status, actors
  role_node = 2,    // a node process: groups, heartbeats, step results
  role_admin = 4,   // regroup, policy, shutdown
};

class peer_registry {
 public:
  /// A bound on remembered peers: each CLI call is a new CAF node, so the least recently
  /// seen are forgotten first (they re-authenticate at the gate on their next connection).
  static constexpr std::size_t capacity = 4096;

  void grant(const caf::node_id& node, std::uint8_t roles);
  std::uint8_t roles_of(const caf::node_id& node) const;
  void forget(const caf::node_id& node);
  std::size_t size() const;

 private:
  struct entry {
    std::uint8_t roles = 0;
    std::uint64_t last_seen = 0;
  };
  mutable std::mutex mu_;
  mutable std::uint64_t clock_ = 0;
  mutable std::map<caf::node_id, entry> peers_;
};

using peer_registry_ptr = std::shared_ptr<peer_registry>;

/// True when the message being handled by `self` comes from an actor of this process, or
/// from a remote node holding any of `needed`. Refusals are logged (rate-limited) under `who`.
bool sender_may(caf::local_actor* self, const peer_registry& peers, std::uint8_t needed, const char* who);

/// True when the sender is an actor of this process (the head's own actors, the gateway).
bool sender_is_local(caf::local_actor* self);

/// The same, for actors whose every message comes from their own process: a refusal is logged
/// (rate-limited) under `who`.
bool sender_is_local(caf::local_actor* self, const char* who);

/// True when the sender is local or lives on `trusted` (a node's actors take orders only from
/// the head they joined). Refusals are logged (rate-limited) under `who`.
bool sender_from(caf::local_actor* self, const caf::node_id& trusted, const char* who);

}  // namespace dls::actors
