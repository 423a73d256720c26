#pragma once
// The one adapter from live state to the policies' snapshot types (policies/snapshot.hpp):
// a TP group keeps a live_request per request (the request's meta and the progress rank 0
// reports of its canvas after every step) and builds the request_view / group_snapshot the
// policies read from them, on its own clock. Nothing here decides anything.
#include "gpu/canvas.hpp"
#include "policies/group_step.hpp"
#include "policies/migration.hpp"
#include "policies/snapshot.hpp"
#include "runtime/cluster_config.hpp"
#include "runtime/messages.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dls::actors {

/// Where a canvas stands, as the policies need it.
struct canvas_progress {
  int32_t prompt_len = 0;
  int32_t gen_len = 0;
  int32_t block_len = 0;
  int32_t block = 0;          // current block (blocks done)
  int32_t step_in_block = 0;  // steps taken in it
  int32_t masks_left = 0;     // masked positions left in it
  bool next_refresh = true;   // the next step recomputes the whole canvas
  bool finished = false;
  // Its commit rule reads tau (threshold). Under any other rule tau changes nothing, so the
  // group holds the request's tau as if the client had pinned it (live_request::tau_pinned).
  bool tau_driven = true;
};

canvas_progress progress_of(const gpu::canvas& c);

/// Whether the controller must leave a request's tau alone: the client pinned it, or its
/// canvas commits by a rule that does not read tau.
bool tau_held(const runtime::work_item& item, const canvas_progress& p);

/// One request of a group: its meta on the group's clock (seconds) and its progress.
struct live_request {
  uint64_t id = 0;
  double arrival_s = 0;
  double deadline_s = 0;
  double tau = 0.9;
  // Lowest tau it has committed at, carried across moves (work_item::tau_low).
  double tau_low = 1.0;
  bool tau_pinned = false;
  double tau_floor = 0;
  bool reject_on_miss = false;  // the client's strict SLO
  canvas_progress progress;
  int group = -1;
};

policy::request_view view_of(const live_request& r);

/// The group's snapshot: `active` and `queued` in the group's order.
struct live_group {
  int id = 0;
  int node = 0;
  int tp = 1;
  std::vector<int> devices;
  bool draining = false;
  double kv_capacity_tokens = 1e18;
  double tau_cap = 0.9;
};

policy::group_snapshot snapshot_of(const live_group& g, double now_s, const std::vector<const live_request*>& active,
                                   const std::vector<const live_request*>& queued);

/// The migration planner's input from the groups' reports, on the planner's clock with now = 0
/// (each report's times are relative to its group's now). Index i of `groups`, `requests` and
/// `names` is report i; `groups[i].id` is i.
struct migration_input {
  std::vector<policy::group_summary> groups;
  std::vector<std::vector<policy::request_view>> requests;
  std::vector<std::string> names;
  std::vector<const std::vector<policy::request_view>*> request_lists() const;
};

migration_input migration_input_of(const std::vector<runtime::group_report>& reports, const policy::quality_model& q);

/// What a node's groups decide with: the step-cost profile and quality curve the head sent,
/// the knobs, and the SLO definition. Shared read-only by every group of the node.
struct policy_context {
  std::optional<policy::step_cost_model> cost;  // none: no profile was given or measured
  policy::quality_model quality;
  policy::group_knobs knobs;
  double slo_scale = 2.0;
  std::string initial_policy = "static";
};

/// Parses the texts of `s`. Without a quality curve, one token per step at every tau (the
/// controller then sees no gain in lowering tau). Throws std::invalid_argument on bad text.
std::shared_ptr<const policy_context> make_policy_context(const runtime::scheduler_settings& s,
                                                          const runtime::engine_defaults& e);

}  // namespace dls::actors
