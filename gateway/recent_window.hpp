#pragma once
// The last few minutes of finished requests, one bucket per second, for the dashboard's
// attainment and latency plots. Pure bookkeeping: the caller passes the time.
#include <cstdint>
#include <deque>
#include <mutex>

#include <nlohmann/json.hpp>

namespace dls::gateway {

class recent_window {
 public:
  /// `seconds` buckets are kept; older ones are dropped.
  explicit recent_window(int seconds) : seconds_(seconds) {}

  /// A finished request at Unix second `now_s`.
  void add(int64_t now_s, bool ok, double latency_ms, bool had_slo, bool slo_met);
  /// [{t, requests, errors, latency_ms_mean, latency_ms_max, slo_requests, slo_met}], oldest first.
  nlohmann::json series() const;

 private:
  struct bucket {
    int64_t t = 0;
    int requests = 0, errors = 0, slo_requests = 0, slo_met = 0;
    double latency_sum = 0, latency_max = 0;
  };
  int seconds_;
  mutable std::mutex mu_;
  std::deque<bucket> buckets_;
};

}  // namespace dls::gateway
