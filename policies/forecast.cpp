#include "policies/forecast.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

namespace dls::policy {

forecast forecast_from_arrivals(const std::vector<arrival_record>& arrivals, double now_s, const forecast_config& cfg) {
  forecast f;
  if (arrivals.empty()) return f;
  const int n_sub = std::max(1, cfg.subwindows);
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
  std::map<std::pair<int, int>, double> shapes;
  for (const auto& a : arrivals) shapes[{a.prompt_len, a.gen_len}] += 1;
  std::vector<std::pair<double, std::pair<int, int>>> by_count;
  for (const auto& [shape, n] : shapes) by_count.push_back({n, shape});
  // Most frequent first; ties by shape, so the mix does not depend on map order.
  std::sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  if (static_cast<int>(by_count.size()) > cfg.max_classes) by_count.resize(static_cast<std::size_t>(cfg.max_classes));
  double total = 0;
  for (const auto& c : by_count) total += c.first;
  for (const auto& c : by_count) f.mix.push_back({c.second.first, c.second.second, c.first / total});
  return f;
}

}  // namespace dls::policy
