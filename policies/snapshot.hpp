#pragma once
// Plain snapshot structs that every policy reads. The live runtime fills them from its actors,
// the simulator keeps its state in them directly, so both run the same decision code.
// All times are seconds on the caller's clock (virtual in the simulator, wall in the runtime);
// policies never read a clock themselves.
#include "common/step_kind.hpp"

#include <cstdint>
#include <vector>

namespace dls::policy {

using common::step_kind;

/// One request as policies see it. Invariant: the request is in block `blocks_done`
/// (0-based) with `masks_left_in_block` masked positions; its next step is a refresh iff
/// `steps_in_block == 0`. A request is finished when blocks_done == blocks_total().
struct request_view {
  std::uint64_t id = 0;
  double arrival_s = 0.0;
  double deadline_s = 0.0;         // arrival + S x isolated latency
  double tau = 0.9;                // current confidence threshold
  /// Lowest tau the request has committed answer tokens at (1: none yet). Its expected
  /// accuracy is that of a decode at this tau throughout (accuracy_ledger, threshold.hpp).
  double tau_low = 1.0;
  /// Client control of tau: a pinned tau is never changed by the controller, and the
  /// controller never sets tau below tau_floor (0: no floor).
  bool tau_pinned = false;
  double tau_floor = 0.0;
  /// The client's strict SLO (on_miss: reject): refused at arrival if it cannot be on time.
  bool reject_on_miss = false;
  int prompt_len = 0;              // P tokens
  int gen_len = 0;                 // G tokens of canvas, a multiple of block_len
  int block_len = 32;              // B
  int blocks_done = 0;
  int steps_in_block = 0;          // steps already taken in the current block
  int masks_left_in_block = 0;     // 0 before the first step of the request
  step_kind next_kind = step_kind::refresh;
  /// Fraction of the layers of the pending refresh already run (layer-split refresh); the
  /// block's tokens commit when the chunk that reaches the last layer is done.
  double refresh_done = 0.0;
  int group = -1;                  // owning group id, -1 while waiting for admission

  int blocks_total() const { return block_len > 0 ? gen_len / block_len : 0; }
  int canvas_len() const { return prompt_len + gen_len; }
  bool finished() const { return blocks_done >= blocks_total(); }
  /// Masks still to commit in the current block; a block not yet started has all B.
  int masks_now() const { return steps_in_block == 0 ? block_len : masks_left_in_block; }
};

/// A tensor-parallel group: `tp` devices of one node running one step loop.
struct group_view {
  int id = 0;
  int node = 0;
  int tp = 1;
  std::vector<int> devices;             // device indices within the node
  std::vector<std::uint64_t> queue;     // admitted-later request ids (FCFS order)
  bool draining = false;                // being drained for a regroup: admit nothing
};

/// Expected arrivals the optimizer plans for: a rate and a length mix.
struct length_class {
  int prompt_len = 0;
  int gen_len = 0;
  double weight = 1.0;                  // fraction of arrivals, sums to 1 over the mix
};

struct forecast {
  double arrival_rate = 0.0;            // requests per second to plan for (bursts included)
  std::vector<length_class> mix;
  /// Sustained rate (e.g. the mean over the forecast window); < 0: same as arrival_rate.
  double mean_rate = -1.0;
};

/// Whole-cluster picture, used by the reconfiguration optimizer and the migration policy.
struct cluster_snapshot {
  double now_s = 0.0;
  std::vector<request_view> requests;
  std::vector<group_view> groups;
  std::vector<int> node_devices;        // devices per node
  forecast load;
};

}  // namespace dls::policy
