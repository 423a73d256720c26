#include "gateway/recent_window.hpp"

#include <algorithm>

namespace dls::gateway {

void recent_window::add(int64_t now_s, bool ok, double latency_ms, bool had_slo, bool slo_met) {
  std::lock_guard<std::mutex> lk(mu_);
  if (buckets_.empty() || buckets_.back().t < now_s) {
    bucket b;
    b.t = now_s;
    buckets_.push_back(b);
  }
  auto& b = buckets_.back();  // a clock step backwards lands in the newest bucket
  ++b.requests;
  if (!ok) {
    ++b.errors;
  } else {
    b.latency_sum += latency_ms;
    b.latency_max = std::max(b.latency_max, latency_ms);
    if (had_slo) {
      ++b.slo_requests;
      if (slo_met) ++b.slo_met;
    }
  }
  while (!buckets_.empty() && buckets_.front().t <= now_s - seconds_) buckets_.pop_front();
}

nlohmann::json recent_window::series() const {
  std::lock_guard<std::mutex> lk(mu_);
  auto out = nlohmann::json::array();
  for (const auto& b : buckets_) {
    int ok = b.requests - b.errors;
    out.push_back({{"t", b.t},
                   {"requests", b.requests},
                   {"errors", b.errors},
                   {"latency_ms_mean", ok > 0 ? b.latency_sum / ok : 0.0},
                   {"latency_ms_max", b.latency_max},
                   {"slo_requests", b.slo_requests},
                   {"slo_met", b.slo_met}});
  }
  return out;
}

}  // namespace dls::gateway
