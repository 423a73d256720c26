#include "policies/placement.hpp"

#include <algorithm>

namespace dls::policy {

double placement_load(const placement_view& g) {
  return static_cast<double>(g.requests) / static_cast<double>(std::max(1, g.tp));
}

int place_request(const std::vector<placement_view>& groups) {
  int best = -1;
  double best_load = 0;
  for (int i = 0; i < static_cast<int>(groups.size()); ++i) {
    const auto& g = groups[static_cast<std::size_t>(i)];
    if (g.draining) continue;
    const double load = placement_load(g);
    if (best < 0 || load < best_load) {
      best = i;
      best_load = load;
    }
  }
  return best;
}

std::vector<int> spread_requests(std::size_t count, const std::vector<int>& degrees) {
  std::vector<int> out;
  if (degrees.empty()) return out;
  std::vector<placement_view> groups(degrees.size());
  for (std::size_t g = 0; g < degrees.size(); ++g) groups[g].tp = degrees[g];
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    const int g = place_request(groups);
    ++groups[static_cast<std::size_t>(g)].requests;
    out.push_back(g);
  }
  return out;
}

}  // namespace dls::policy
