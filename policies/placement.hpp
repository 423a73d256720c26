#pragma once
// Placement: which TP group a new (or moved) request joins, and how the requests drained
// from a node spread over its new groups after a regroup. Both balance the queued work per
// device: a TP group of degree k drains its queue about k times faster.
#include <vector>

namespace dls::policy {

/// A group as placement sees it.
struct placement_view {
  int tp = 1;
  double queued_tokens = 0;  // answer tokens still to decode on it
  bool draining = false;     // being drained for a regroup: place nothing there
};

/// Index of the group with the least queued tokens per device (ties: the lowest index), or
/// -1 when every group is draining or there is none.
int place_request(const std::vector<placement_view>& groups);

/// Spreads requests over fresh groups of the given degrees: in the order given, each goes to
/// the group with the least work per device so far and adds its `work` there. Returns the
/// group index of each request.
std::vector<int> spread_requests(const std::vector<double>& work, const std::vector<int>& degrees);

}  // namespace dls::policy
