#pragma once
// Layer segments of a step with layer-split refreshes (docs/engine.md). Each item of a batch
// runs layers [first, second); a segment is a run of layers over which the set of items running
// them does not change, so a backend can run it as one ordinary pass over those items' rows.
// Both backends plan their steps with this one rule.
#include "gpu/canvas.hpp"

#include <cstddef>
#include <utility>
#include <vector>

namespace dls::gpu {

/// The layers [first, second) a plan runs (layer1 < 0: through the last). Throws
/// std::invalid_argument naming the problem for a range outside [0, layers), an empty one, or a
/// partial range on anything but a refresh.
std::pair<int, int> plan_layers(const step_plan& p, int layers);

struct layer_segment {
  int l0 = 0, l1 = 0;               // layers [l0, l1)
  std::vector<std::size_t> items;   // the items that run them, in batch order
  bool all = false;                 // every item runs them: the rows stay where they are
};

/// Cuts [0, layers) wherever an item's range starts or ends and lists who runs each piece;
/// pieces no item runs are left out. Ranges must lie within [0, layers) and be non-empty
/// (the backends check plans before planning).
std::vector<layer_segment> plan_layer_segments(const std::vector<std::pair<int, int>>& ranges, int layers);

}  // namespace dls::gpu
