#pragma once
// A node's tensor-parallel layout, e.g. {2} or {1, 1}: the TP degree of each group over the
// node's devices. The running cluster's `groups:` and the simulator's `layout:` are this type,
// and both cluster files are checked by the one fit check below.
#include <string>
#include <vector>

namespace dls::common {

using tp_layout = std::vector<int>;

/// Why `groups` does not fit a node of `devices` devices ("" when it does): every degree is at
/// least 1 and together they use at most the node's devices. A running node may leave devices
/// out of every group; the simulator also asks for all of them to be used (`whole`), because its
/// reconfiguration partitions whole nodes.
inline std::string layout_problem(int devices, const tp_layout& groups, bool whole = false) {
  if (groups.empty()) return "no groups";
  int used = 0;
  for (int g : groups) {
    if (g < 1) return "a group of " + std::to_string(g) + " devices";
    used += g;
  }
  if (used > devices || (whole && used != devices))
    return "groups use " + std::to_string(used) + " devices but the node has " + std::to_string(devices);
  return "";
}

}  // namespace dls::common
