#pragma once
// The input of one live step decision as a line of JSON: what a TP group passed to
// policy::decide_step (its snapshot, its accuracy ledger, its recent arrivals) and what it
// decided with besides the cluster file (the policy set, its measured per-step overhead).
// A group writes them under DILASERVE_DECISION_LOG; `dilaserve bench-decisions` reads them back
// and times the policies on exactly the states a live group decided on, away from the live
// machine's noise.
#include "policies/group_step.hpp"
#include "policies/threshold.hpp"

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace dls::actors {

struct decision_record {
  std::string group;           // the group's name (node/gN)
  std::string policy;          // the policy set it decided with
  double step_overhead_s = 0;  // added to the profile's step costs, as the group does
  policy::group_snapshot snapshot;               // its ledger and load pointers are not kept
  policy::accuracy_ledger ledger;                // as it was before the decision
  std::vector<policy::arrival_record> arrivals;  // the group's load forecast's history
};

/// One line of JSON, without the newline; doubles round-trip exactly.
std::string to_json_line(const decision_record& r);

/// Reads a line written by to_json_line. Throws std::invalid_argument naming the field that is
/// missing, of the wrong type or out of range.
decision_record decision_record_from_json(const std::string& line);

/// Appends decision records to DIR/<group>.jsonl, one decision in `every`: each is a few hundred
/// bytes per request the group holds.
class decision_log {
 public:
  /// Throws std::runtime_error naming the path when it cannot be opened.
  decision_log(const std::string& dir, const std::string& group, int every);
  /// Counts one decision; true when this one is to be written.
  bool due() { return count_++ % every_ == 0; }
  void append(const decision_record& r);

 private:
  std::ofstream out_;
  int every_;
  std::uint64_t count_ = 0;
};

}  // namespace dls::actors
