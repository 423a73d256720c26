#pragma once
// The gateway's recent picture of the cluster (the head's status JSON), refreshed in
// the background. It decides 503 (no live group) without a round trip per request and
// feeds the node and queue gauges of /metrics.
#include "gateway/cluster_bridge.hpp"

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace dls::gateway {

class cluster_view {
 public:
  /// `on_update` runs on the refresh thread with every fresh status.
  cluster_view(cluster_bridge& bridge, std::function<void(const nlohmann::json&)> on_update);
  ~cluster_view();

  /// The last status (an empty object before the first answer).
  nlohmann::json latest() const;
  /// Fetches now (at most `timeout`); returns it, or nothing if the head did not answer.
  std::optional<nlohmann::json> refresh(std::chrono::milliseconds timeout);
  /// True when the last status (fetched again first if it showed none) lists a live group.
  bool has_live_group();

 private:
  void loop();
  cluster_bridge& bridge_;
  std::function<void(const nlohmann::json&)> on_update_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  nlohmann::json latest_ = nlohmann::json::object();
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dls::gateway
