#pragma once
// One step decision of a TP group, as the live runtime makes it before every step: which
// queued requests become active (admit), every request's tau (control_group: per-request tau
// from slack, then the aggregate cap, honouring pinned taus and floors) and which active
// requests denoise in the step (form_batch: order, token budget, refresh joins). The policy
// set decides which of these mechanisms run, so `static` is FCFS at the reference tau.
#include "policies/presets.hpp"
#include "policies/quality.hpp"
#include "policies/scheduler.hpp"
#include "policies/snapshot.hpp"
#include "policies/step_cost.hpp"
#include "policies/threshold.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dls::policy {

/// The knobs of a live group's policies that do not come from the policy set.
struct group_knobs {
  int token_budget = 8192;   // query rows per step
  int max_batch = 8;         // requests per step
  int max_active = 64;       // requests admitted at once (holding KV memory)
  double tau_max = 0.9;      // the reference tau (the cluster's engine.threshold)
  double tau_min = 0.7;
  double tau_step = 0.05;
  double accuracy_budget = -1;  // threshold_config::accuracy_budget; < 0: none
  /// Refuse newly queued requests the group cannot finish by their deadline even at tau_min
  /// (policies/overload.hpp); false: they wait (the FCFS behaviour of every set before).
  bool refuse_overload = false;
  /// on_miss: reject (a strict SLO for every request): refuse at its first decision a newly
  /// queued request that cannot meet its deadline (policy::refuse_if_late, as the simulator).
  bool reject_on_miss = false;
  /// The tau cap's forecast of the group's arrivals (threshold.hpp, load_forecast): the history
  /// it predicts from and how often it is recomputed (seconds).
  double cap_forecast_s = 2.0;
  double cap_forecast_refresh_s = 0.5;
  /// Tau control between changes of the group's requests at most this often (seconds).
  double control_interval_s = 0.02;
};

struct group_policy {
  std::string name;
  scheduler_config sched;
  threshold_config thr;
  int max_active = 64;
  bool refuse_overload = false;  // group_knobs::refuse_overload
  bool reject_on_miss = false;   // group_knobs::reject_on_miss
  bool tau_control() const { return thr.per_request || thr.load_cap; }
};

/// The mechanisms of `set` with `knobs`. Layer-split refreshes are not part of a live group's
/// step (the simulator alone models them).
group_policy make_group_policy(const policy_set& set, const group_knobs& knobs);

/// A group's state for one decision: its view, its active requests (admitted, holding KV) and
/// its queued ones, on the caller's clock.
struct group_snapshot {
  double now_s = 0;
  group_view group;
  std::vector<request_view> active;
  std::vector<request_view> queued;
  double kv_free_tokens = 1e18;  // canvas tokens of KV memory not held by active requests
  double tau_cap = 0.9;          // the cap of the previous decision (for the step-time estimate)
  /// Run the tau controller in this decision. The caller runs it when the group's requests
  /// changed or some time passed (as the simulator's control interval does), not every step:
  /// otherwise every request keeps its tau.
  bool control_due = true;
  /// The group's accuracy budget (caller-owned running state, see threshold.hpp): the tau
  /// controller spends it; null or disabled: tau_min alone bounds the loss.
  accuracy_ledger* ledger = nullptr;
  /// Ids of queued requests no decision has seen yet: the only ones load shedding may refuse.
  std::vector<std::uint64_t> fresh;
  /// The group's recent arrivals (caller-owned running state, see threshold.hpp): the tau cap
  /// counts the work they predict. Null: the cap sees the work present only.
  load_forecast* load = nullptr;
  /// Queued requests the caller left out of `queued` (a decision that can neither admit nor
  /// change taus need not see them): the batch still counts them as waiting.
  std::size_t unlisted_queued = 0;
};

/// A request the group refuses (load shedding, policies/overload.hpp), with a one-line reason.
struct refusal {
  std::uint64_t id = 0;
  std::string reason;
};

struct step_decision {
  std::vector<std::uint64_t> admitted;  // ids moved from queued to active, in admission order
  std::vector<std::uint64_t> batch;     // ids of the active requests that step now
  std::vector<std::size_t> batch_index; // the same requests, as indices into the snapshot's active list
  double tau_cap = 0.9;
  double step_s = 0;                    // expected step time of the group after admission
  int infeasible = 0;                   // prefixes the cap could not rescue (0 without tau control)
  bool controlled = false;              // the tau controller ran (taus may have changed)
  std::vector<refusal> refused;         // removed from queued: the group cannot finish them in time
  std::vector<refusal> rejected;        // removed from queued: strict SLO (on_miss: reject) unreachable
  /// Load shedding waited: tau control may still lower tau, and nobody's is lowered yet. The
  /// fresh requests stay fresh for the next decision (the caller keeps them).
  bool shedding_deferred = false;
};

/// Decides the next step and applies it to `g`: admitted requests move from `queued` to the
/// end of `active`, and every request's tau (active and queued) is set. While the group
/// drains it admits nothing and steps only requests inside a block (the others wait at their
/// refresh boundary, where the canvas alone can move).
/// With refuse_overload and a cost model, the fresh queued requests it cannot finish in time
/// even at their lowest tau are then refused and leave `queued`, but only once tau is lowered:
/// after the tau controller ran and lowered some request's tau (or when tau cannot be lowered:
/// no tau control, or tau_min at the reference); until then the decision defers shedding.
/// With reject_on_miss and a cost model, every fresh queued request is first checked by
/// policy::refuse_if_late against the active requests and the queued ones before it (at its
/// lowest tau); those that cannot meet their deadline leave `queued` as `rejected`, before
/// admission, so a strict request is refused at its first decision and never started.
/// Without a cost model (`cost` null: no profile) the group decides with order and token
/// budget alone: no slack budget, no admission control, no tau control, no refusals.
step_decision decide_step(group_snapshot& g, const group_policy& p, const step_cost_model* cost,
                          const quality_model& q);

/// The deadline of a request without an explicit SLO: arrival + slo_scale x its latency alone
/// (the definition `dilaserve sim` uses): on one device at the reference tau, plus
/// `request_overhead_s`, what its path outside the engine adds to a lone request's latency.
double slo_deadline_s(double arrival_s, double slo_scale, const step_cost_model& cost, const quality_model& q,
                      int prompt_len, int gen_len, int block_len, double tau_ref, double request_overhead_s = 0);

}  // namespace dls::policy
