#pragma once
// Everything the route handlers share: limits, model facts, keys, the bridge into the
// actor system, metrics and the cluster view. One per gateway.
#include "gateway/api_keys.hpp"
#include "gateway/cluster_bridge.hpp"
#include "gateway/cluster_view.hpp"
#include "gateway/metrics.hpp"
#include "gateway/openai_request.hpp"
#include "gateway/recent_window.hpp"
#include "gpu/chat_template.hpp"
#include "gpu/tokenizer.hpp"
#include "runtime/cluster_config.hpp"
#include "runtime/request_limits.hpp"

#include <atomic>
#include <memory>
#include <optional>

namespace dls::gateway {

// Five minutes of per-second history for the dashboard's plots.
constexpr int recent_window_s = 300;

struct gateway_context {
  gateway_context(caf::actor_system& sys, const runtime::cluster_config& cfg, runtime::head_actor endpoint);

  runtime::http_config http;
  model_facts facts;
  std::unique_ptr<gpu::tokenizer> tokenizer;
  std::optional<gpu::chat_template> chat;  // the checkpoint's, when it has one
  std::string end_of_turn;                 // its end-of-turn marker, a stop for chat answers
  runtime::request_checker limits;  // the same bounds the head endpoint applies (limits:)
  api_keys keys;
  cluster_bridge bridge;
  gateway_metrics metrics;
  recent_window recent{recent_window_s};
  cluster_view view;  // after metrics, which its updates feed
  std::atomic<int> in_flight{0};
  std::atomic<bool> stopping{false};
};

/// Counts a finished request in the metrics and the dashboard's history.
void record_answer(gateway_context& ctx, const runtime::answer& a, bool had_slo, double seconds);

/// A place among http.max_concurrent requests in flight, held until destroyed.
class concurrency_slot {
 public:
  explicit concurrency_slot(gateway_context& ctx);
  ~concurrency_slot();
  concurrency_slot(const concurrency_slot&) = delete;
  concurrency_slot& operator=(const concurrency_slot&) = delete;
  bool granted() const { return granted_; }

 private:
  gateway_context& ctx_;
  bool granted_ = false;
};

}  // namespace dls::gateway
