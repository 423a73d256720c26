#include "gpu/layer_segments.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace dls::gpu {

std::pair<int, int> plan_layers(const step_plan& p, int layers) {
  const int l1 = p.layer1 < 0 ? layers : p.layer1;
  if (p.layer0 < 0 || l1 > layers || p.layer0 >= l1)
    throw std::invalid_argument("bad step plan: layers [" + std::to_string(p.layer0) + ", " + std::to_string(l1) +
                                ") of " + std::to_string(layers));
  if ((p.layer0 > 0 || l1 < layers) && p.kind != step_kind::refresh)
    throw std::invalid_argument("bad step plan: only a refresh may run part of the layers");
  return {p.layer0, l1};
}

std::vector<layer_segment> plan_layer_segments(const std::vector<std::pair<int, int>>& ranges, int layers) {
  std::vector<int> cuts{0, layers};
  for (const auto& r : ranges) {
    cuts.push_back(r.first);
    cuts.push_back(r.second);
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<layer_segment> out;
  for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
    layer_segment g;
    g.l0 = cuts[k];
    g.l1 = cuts[k + 1];
    // Ranges are unions of these pieces, so an item runs the piece iff it covers its start.
    for (std::size_t i = 0; i < ranges.size(); ++i)
      if (ranges[i].first <= g.l0 && g.l0 < ranges[i].second) g.items.push_back(i);
    if (g.items.empty()) continue;
    g.all = g.items.size() == ranges.size();
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace dls::gpu
