#include "gateway/cluster_view.hpp"

namespace dls::gateway {

namespace {
// How long an answer or a status vouches for a live group. A node that dies is noticed
// by the gateway within this time plus the head's dead_after_ms; requests accepted in
// between wait for a group at the supervisor and end with 503 if none comes back.
constexpr auto evidence_ttl = std::chrono::seconds(1);
constexpr auto status_timeout = std::chrono::milliseconds(2000);

bool lists_groups(const nlohmann::json& j) { return j.contains("groups") && !j["groups"].empty(); }
}  // namespace

cluster_view::cluster_view(cluster_bridge& bridge, std::function<void(const nlohmann::json&)> on_update)
    : bridge_(bridge), on_update_(std::move(on_update)) {}

std::optional<nlohmann::json> cluster_view::refresh(std::chrono::milliseconds timeout) {
  auto text = bridge_.status(timeout);
  if (!text) return std::nullopt;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  {
    std::lock_guard<std::mutex> lk(mu_);
    live_ = lists_groups(j);
    fetched_ = clock_type::now();
  }
  if (on_update_) on_update_(j);
  return j;
}

void cluster_view::note_answer() { last_answer_ns_ = clock_type::now().time_since_epoch().count(); }

bool cluster_view::has_live_group() {
  auto now = clock_type::now();
  auto answered = clock_type::time_point(clock_type::duration(last_answer_ns_.load()));
  {
    // The newest evidence decides while it is fresh: a status taken after the last
    // answer that lists no group (a node just died) overrides that answer.
    std::lock_guard<std::mutex> lk(mu_);
    if (fetched_ >= answered && now - fetched_ < evidence_ttl) return live_;
  }
  if (now - answered < evidence_ttl) return true;
  auto fresh = refresh(status_timeout);
  return fresh && lists_groups(*fresh);
}

}  // namespace dls::gateway
