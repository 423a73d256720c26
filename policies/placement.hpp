#pragma once
// Placement: which TP group a new (or moved) request joins, and how the requests drained
// from a node spread over its new groups after a regroup. Both balance the requests each
// device holds: a TP group of degree k steps its requests about k times faster.
//
// Requests held, not their remaining tokens or predicted seconds: the latency a newcomer sees
// on a group is set by how many requests share its steps (every held request is stepped in
// turn, and a step grows with its batch) more than by how much work they have left. On the
// simulator's workload suite, balancing remaining answer tokens instead cost `static` 4.5
// points of attainment on average (38 at worst) and balancing predicted group-seconds cost
// every policy too (docs/policies.md, "Placement").
#include <cstddef>
#include <vector>

namespace dls::policy {

/// A group as placement sees it.
struct placement_view {
  int tp = 1;
  int requests = 0;       // requests the group holds: running and queued
  bool draining = false;  // being drained for a regroup: place nothing there
};

/// What placement balances: requests held per device.
double placement_load(const placement_view& g);

/// Index of the group with the least placement_load (ties: the lowest index), or -1 when
/// every group is draining or there is none.
int place_request(const std::vector<placement_view>& groups);

/// Spreads `count` requests over fresh groups of the given degrees, each in turn to the group
/// place_request picks. Returns the group index of each request.
std::vector<int> spread_requests(std::size_t count, const std::vector<int>& degrees);

}  // namespace dls::policy
