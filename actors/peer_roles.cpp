#include "actors/peer_roles.hpp"

#include "runtime/log.hpp"

#include <caf/actor_system.hpp>
#include <caf/local_actor.hpp>

#include <atomic>

namespace dls::actors {

void peer_registry::grant(const caf::node_id& node, std::uint8_t roles) {
  std::lock_guard<std::mutex> lk(mu_);
  auto& e = peers_[node];
  e.roles |= roles;
  e.last_seen = ++clock_;
  if (peers_.size() <= capacity) return;
  auto oldest = peers_.begin();
  for (auto it = peers_.begin(); it != peers_.end(); ++it)
    if (it->second.last_seen < oldest->second.last_seen) oldest = it;
  peers_.erase(oldest);
}

std::uint8_t peer_registry::roles_of(const caf::node_id& node) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = peers_.find(node);
  if (it == peers_.end()) return role_none;
  it->second.last_seen = ++clock_;
  return it->second.roles;
}

void peer_registry::forget(const caf::node_id& node) {
  std::lock_guard<std::mutex> lk(mu_);
  peers_.erase(node);
}

std::size_t peer_registry::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return peers_.size();
}

bool sender_is_local(caf::local_actor* self) {
  const auto& s = self->current_sender();
  return s && s->node() == self->system().node();
}

namespace {

void log_refusal(const caf::strong_actor_ptr& s, const char* who) {
  // At most one line per 256 refusals, so a flood cannot fill the disk.
  static std::atomic<std::uint64_t> refused{0};
  if (refused.fetch_add(1) % 256 == 0)
    runtime::log_line(who, std::string("refused a message from ") +
                               (s ? "unauthenticated node " + to_string(s->node()) : std::string("an anonymous sender")) +
                               " (" + std::to_string(refused.load()) + " refused so far)");
}

}  // namespace

bool sender_may(caf::local_actor* self, const peer_registry& peers, std::uint8_t needed, const char* who) {
  const auto& s = self->current_sender();
  if (s && s->node() == self->system().node()) return true;
  if (s && (peers.roles_of(s->node()) & needed) != 0) return true;
  log_refusal(s, who);
  return false;
}

bool sender_is_local(caf::local_actor* self, const char* who) {
  if (sender_is_local(self)) return true;
  log_refusal(self->current_sender(), who);
  return false;
}

bool sender_from(caf::local_actor* self, const caf::node_id& trusted, const char* who) {
  const auto& s = self->current_sender();
  if (s && (s->node() == self->system().node() || s->node() == trusted)) return true;
  log_refusal(s, who);
  return false;
}

}  // namespace dls::actors
