#pragma once
// The gateway's recent picture of the cluster (the head's status JSON). It decides 503
// (no live group) and feeds the node and queue gauges of /metrics. The head's status
// walks its actor directory (every retained request row), so the view asks for it only
// when it must: on a scrape, on /v1/cluster, and before a request when neither a fresh
// status nor a recent answer shows a live group.
#include "gateway/cluster_bridge.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>

namespace dls::gateway {

class cluster_view {
 public:
  /// `on_update` runs with every fresh status.
  cluster_view(cluster_bridge& bridge, std::function<void(const nlohmann::json&)> on_update);

  /// Fetches now (at most `timeout`); returns it, or nothing if the head did not answer.
  std::optional<nlohmann::json> refresh(std::chrono::milliseconds timeout);
  /// Whether a live group exists, from the newest of: the last answer, the last status
  /// (each good for a second), or else a status fetched now.
  bool has_live_group();
  /// A request was answered: a live group exists right now.
  void note_answer();

 private:
  using clock_type = std::chrono::steady_clock;
  cluster_bridge& bridge_;
  std::function<void(const nlohmann::json&)> on_update_;
  std::mutex mu_;  // one status query at a time; guards the two fields below
  bool live_ = false;
  clock_type::time_point fetched_{};
  std::atomic<int64_t> last_answer_ns_{0};
};

}  // namespace dls::gateway
