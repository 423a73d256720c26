#include "policies/placement.hpp"

#include <algorithm>

namespace dls::policy {

int place_request(const std::vector<placement_view>& groups) {
  int best = -1;
  double best_cost = 0;
  for (int i = 0; i < static_cast<int>(groups.size()); ++i) {
    const auto& g = groups[static_cast<std::size_t>(i)];
    if (g.draining) continue;
    const double cost = g.queued_tokens / std::max(1, g.tp);
    if (best < 0 || cost < best_cost) {
      best = i;
      best_cost = cost;
    }
  }
  return best;
}

std::vector<int> spread_requests(const std::vector<double>& work, const std::vector<int>& degrees) {
  std::vector<int> out;
  if (degrees.empty()) return out;
  std::vector<placement_view> groups(degrees.size());
  for (std::size_t g = 0; g < degrees.size(); ++g) groups[g].tp = degrees[g];
  out.reserve(work.size());
  for (double w : work) {
    const int g = place_request(groups);
    groups[static_cast<std::size_t>(g)].queued_tokens += w;
    out.push_back(g);
  }
  return out;
}

}  // namespace dls::policy
