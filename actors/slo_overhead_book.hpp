#pragma once
// The idle per-step overhead a node's groups count in their requests' deadlines, one figure per
// group size. The first group of a size times it when it starts; a group formed later, by a
// regroup while the node may be busy, takes the same figure, so a request's SLO does not depend
// on when its group was formed. Shared by the node's group actors, hence the lock.
#include <map>
#include <mutex>
#include <optional>

namespace dls::actors {

class slo_overhead_book {
 public:
  /// The figure in force for groups of `workers` workers, if one was recorded.
  std::optional<double> find(int workers) const;
  /// Records `seconds` for groups of `workers` workers unless a figure is already recorded,
  /// and returns the one in force (groups that start together all adopt the first).
  double offer(int workers, double seconds);

 private:
  mutable std::mutex mutex_;
  std::map<int, double> by_size_;
};

}  // namespace dls::actors
