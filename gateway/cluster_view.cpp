#include "gateway/cluster_view.hpp"

namespace dls::gateway {

namespace {
// Often enough that a scrape sees queues of the last half second, rare enough that the
// head's status (a walk over its directory) stays a negligible share of its work.
constexpr auto refresh_interval = std::chrono::milliseconds(500);
constexpr auto status_timeout = std::chrono::milliseconds(2000);
}  // namespace

cluster_view::cluster_view(cluster_bridge& bridge, std::function<void(const nlohmann::json&)> on_update)
    : bridge_(bridge), on_update_(std::move(on_update)) {
  thread_ = std::thread([this] { loop(); });
}

cluster_view::~cluster_view() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

nlohmann::json cluster_view::latest() const {
  std::lock_guard<std::mutex> lk(mu_);
  return latest_;
}

std::optional<nlohmann::json> cluster_view::refresh(std::chrono::milliseconds timeout) {
  auto text = bridge_.status(timeout);
  if (!text) return std::nullopt;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  {
    std::lock_guard<std::mutex> lk(mu_);
    latest_ = j;
  }
  if (on_update_) on_update_(j);
  return j;
}

bool cluster_view::has_live_group() {
  auto live = [](const nlohmann::json& j) { return j.contains("groups") && !j["groups"].empty(); };
  if (live(latest())) return true;
  auto fresh = refresh(status_timeout);
  return fresh && live(*fresh);
}

void cluster_view::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    lk.unlock();
    refresh(status_timeout);
    lk.lock();
    cv_.wait_for(lk, refresh_interval, [this] { return stopping_; });
  }
}

}  // namespace dls::gateway
