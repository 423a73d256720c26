#pragma once
// The gateway's Prometheus metrics (names dilaserve_*, small label sets), kept in a
// prometheus-cpp registry and rendered in its text format for /metrics.
#include "runtime/messages.hpp"
#include "runtime/step_histogram.hpp"

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace dls::gateway {

class gateway_metrics {
 public:
  gateway_metrics();
  ~gateway_metrics();

  /// One HTTP response; `route` must be one of a fixed set (the label stays small).
  void count_response(const std::string& route, int status);
  /// A request the cluster finished (ok or not), seen at the gateway after `seconds`.
  void observe_answer(const runtime::answer& a, bool had_slo, double seconds);
  void observe_first_block(double seconds);
  void set_in_flight(int n);
  /// From the head's status JSON: node liveness, per-group queue depth, and what grew since the
  /// last status: step times by kind, migrations and regroups (kept monotonic across groups
  /// that come and go).
  void update_cluster(const nlohmann::json& status);
  std::string render() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* responses_;
  prometheus::Family<prometheus::Counter>* answers_;
  prometheus::Family<prometheus::Counter>* slo_;
  prometheus::Counter* moves_;
  prometheus::Histogram* latency_;
  prometheus::Histogram* first_block_;
  prometheus::Histogram* tokens_per_step_;
  prometheus::Histogram* tau_;
  prometheus::Gauge* in_flight_;
  prometheus::Family<prometheus::Gauge>* queue_depth_;
  prometheus::Family<prometheus::Gauge>* node_up_;
  prometheus::Gauge* cluster_in_flight_;
  prometheus::Histogram* step_refresh_;
  prometheus::Histogram* step_reuse_;
  prometheus::Counter* migrations_;
  prometheus::Counter* reconfigurations_;
  std::mutex mu_;  // the per-group and per-node gauges come and go
  std::map<std::string, prometheus::Gauge*> groups_, nodes_;
  // What each group (by name) and the reconfigurer last reported, for the increments.
  struct group_totals {
    runtime::step_histogram refresh, reuse;
    uint64_t migrations = 0;
  };
  std::map<std::string, group_totals> seen_groups_;
  uint64_t seen_regroups_ = 0;
};

}  // namespace dls::gateway
