#pragma once
// Migration policy: which requests move between groups, and what moves with them.
//
// Cost of moving request r (canvas L = P + G tokens) over a link of bandwidth W:
//   at a refresh boundary (next step is a refresh) only the canvas moves:
//       t = latency + (4 L + 64) / W                         (int32 ids + block/tau/RNG state)
//   mid-block the KV cache is either moved or rebuilt:
//       t_kv = latency + (kv_bytes_per_token L + 4 L) / W
//       t_re = latency + 4 L / W + (refresh - reuse step cost at the destination)
//   and the cheaper one is taken (rebuilding turns r's next step into a refresh).
//
// Deadline mode (DiLaServe): for each request predicted to miss where it is
// (slack < 0 at its group's step time) but able to make it alone, take the destination that
// minimises  t_move + remaining_steps x step_s'(dst), where step_s' is the destination's step
// time with r added; accept only if r then meets its deadline and every request already on the
// destination that was meeting its deadline still does (step_s' <= the destination's
// max_step_s). So a move never makes a destination miss. A request part-way through a split
// refresh also pays refresh_done x its refresh alone at the destination: only the canvas and
// finished KV move, so the layers it has run are run again. Per invocation at most 4 x max_moves
// candidates (the nearest to rescue) are tried against at most 32 destinations each.
// Balance mode (Llumnix-style baseline): ignores deadlines; while the most loaded group's load
// (requests per device) exceeds imbalance x the least loaded's + 1, move the cheapest-to-move
// request from the former to the latter.
#include "policies/predict.hpp"
#include "policies/quality.hpp"
#include "policies/snapshot.hpp"
#include "policies/step_cost.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dls::policy {

enum class migration_mode { none, balance, deadline };

struct migration_config {
  migration_mode mode = migration_mode::deadline;
  int max_moves = 16;             // per invocation, bounds the burst of transfers
  double imbalance = 1.5;         // balance mode trigger
  double token_budget = 8192;
  int max_active = 64;
};

struct link_params {
  double intra_node_bytes_per_s = 450e9;   // NVLink per direction
  double inter_node_bytes_per_s = 50e9;    // 400 Gb/s NIC per GPU
  double latency_s = 10e-6;
  double kv_bytes_per_token = 524288;      // LLaDA-8B bf16
};

/// Per-group summary the policy needs; the caller keeps these current.
struct group_summary {
  int id = 0;
  int node = 0;
  int tp = 1;
  bool draining = false;
  group_load load;                // every request it holds, running and queued
  int active = 0;
  double kv_free_tokens = 0;
  double step_s = 0;              // expected step time now
  double steps_per_block = 10;    // steps per refresh at the group's typical tau, for step_s'
  bool at_risk = false;           // has a request predicted to miss: its requests are scanned
};

struct transfer_cost {
  double seconds = 0;
  double bytes = 0;
  bool kv_moved = false;          // false: canvas only (refresh boundary or rebuild)
  bool rebuild = false;           // mid-block, KV rebuilt by an extra refresh at the destination
};
transfer_cost move_cost(const request_view& r, bool same_node, double dst_refresh_extra_s,
                        const link_params& link);

/// Mid-block, from measured figures: move the KV cache (link.latency_s + kv_bytes /
/// link.bytes_per_s) or rebuild it at the destination, where one refresh replaces the reuse
/// step the request would have taken (refresh - reuse on a TP-`tp` group, from the profile).
struct kv_move_choice {
  double transfer_s = 0;
  double recompute_s = 0;
  bool transfer = false;  // true: moving the cache is the faster way
};
/// Throws std::invalid_argument for a link without bandwidth or a TP degree the model lacks.
kv_move_choice compare_kv_move(double kv_bytes, const transfer_link& link, const step_cost_model& m, int tp,
                               int canvas_len, int block_len);

/// The profile's link measured with UCX_TLS `tls` (exactly that value), or null.
const transfer_link* measured_link(const std::vector<transfer_link>& links, const std::string& tls);

struct migration_decision {
  std::uint64_t request = 0;
  int from = 0;                   // group ids
  int to = 0;
  transfer_cost cost;
};

/// What a group's held requests (running and queued) tell the planner about its pace, as both
/// callers derive it when they plan: `at_risk` when one of them would miss at the group's
/// expected step time `s.step_s` from `now`, and `steps_per_block` at their mean tau.
void set_pace(group_summary& s, const std::vector<request_view>& held, double now, const quality_model& q);

/// `reqs[g]` are the requests group g holds, running and queued (a queued one moves as its
/// canvas), `groups[g]` its summary (indexed alike). The live migrator and the simulator both
/// pass them so.
std::vector<migration_decision> plan_migrations(
    const std::vector<group_summary>& groups, const std::vector<const std::vector<request_view>*>& reqs,
    double now, const step_cost_model& m, const quality_model& q, const migration_config& cfg,
    const link_params& link);

}  // namespace dls::policy
