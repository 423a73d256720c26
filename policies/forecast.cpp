#include "policies/forecast.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dls::policy {

std::vector<length_class> length_mix(std::vector<request_shape> shapes, int classes, int block_len) {
  std::vector<length_class> out;
  if (shapes.empty() || classes < 1) return out;
  const int block = std::max(1, block_len);
  std::sort(shapes.begin(), shapes.end(), [](const request_shape& a, const request_shape& b) {
    const int la = a.prompt_len + a.gen_len, lb = b.prompt_len + b.gen_len;
    return la != lb ? la < lb : a.gen_len < b.gen_len;
  });
  const std::size_t n = shapes.size();
  const std::size_t k = std::min<std::size_t>(static_cast<std::size_t>(classes), n);
  for (std::size_t c = 0; c < k; ++c) {
    const std::size_t lo = c * n / k, hi = (c + 1) * n / k;
    if (hi <= lo) continue;
    double p = 0, g = 0;
    for (std::size_t i = lo; i < hi; ++i) {
      p += shapes[i].prompt_len;
      g += shapes[i].gen_len;
    }
    const double cnt = static_cast<double>(hi - lo);
    length_class lc;
    lc.prompt_len = static_cast<int>(std::lround(p / cnt));
    lc.gen_len = std::max(block, static_cast<int>(std::lround(g / cnt / block)) * block);
    lc.weight = cnt / static_cast<double>(n);
    out.push_back(lc);
  }
  return out;
}

forecast forecast_from_arrivals(const std::vector<arrival_record>& arrivals, double now_s, const forecast_config& cfg) {
  forecast f;
  if (arrivals.empty()) return f;
  const double sub_s = std::min(cfg.window_s, std::max(1e-9, cfg.subwindow_s));
  const int n_sub = std::max(1, static_cast<int>(std::lround(cfg.window_s / sub_s)));
  const double sub = cfg.window_s / n_sub;
  std::vector<double> counts(static_cast<std::size_t>(n_sub), 0.0);
  double in_window = 0;
  for (auto it = arrivals.rbegin(); it != arrivals.rend(); ++it) {
    const double age = now_s - it->t_s;
    if (age >= cfg.window_s) break;
    const int k = std::min(n_sub - 1, static_cast<int>(std::max(0.0, age) / sub));
    counts[static_cast<std::size_t>(k)] += 1;
    in_window += 1;
  }
  std::sort(counts.begin(), counts.end());
  const auto qi = static_cast<std::size_t>(std::min<double>(n_sub - 1, std::floor(cfg.quantile * n_sub)));
  f.arrival_rate = counts[qi] / sub;
  f.mean_rate = in_window / cfg.window_s;
  const std::size_t keep = std::min(arrivals.size(), static_cast<std::size_t>(std::max(1, cfg.max_mix_arrivals)));
  std::vector<request_shape> shapes;
  shapes.reserve(keep);
  for (std::size_t i = arrivals.size() - keep; i < arrivals.size(); ++i)
    shapes.push_back({arrivals[i].prompt_len, arrivals[i].gen_len});
  f.mix = length_mix(std::move(shapes), cfg.max_classes, cfg.block_len);
  return f;
}

forecast provisioning_forecast(const std::vector<arrival_record>& history, const forecast_config& cfg) {
  if (history.empty()) return {};
  auto whole = cfg;
  // The span from the first arrival to the last, each inside it (an arrival exactly one window
  // old would fall out of forecast_from_arrivals' window).
  const double eps = 1e-9;
  whole.window_s = std::max(cfg.subwindow_s, history.back().t_s - history.front().t_s) + 2 * eps;
  whole.max_mix_arrivals =
      static_cast<int>(std::min<std::size_t>(history.size(), static_cast<std::size_t>(std::numeric_limits<int>::max())));
  return forecast_from_arrivals(history, history.back().t_s + eps, whole);
}

}  // namespace dls::policy
