#pragma once
// Deadline scheduler: per group, which requests denoise in the next step (batch formation
// within a token budget) and which queued requests become active (admission).
//
// Order keys: FCFS = arrival time (the static baseline). Least slack = deadline - now -
// predicted remaining time at the request's own tau and the group's current step time. With
// `demote_late`, late requests (those that miss even if each remaining step ran alone on the
// group, or, without a cost model, those with negative slack) go after every request that can
// still make it, shortest remaining work first; plain least-slack would serve the latest
// first and let one overload cascade into everyone missing.
//
// Chain slack (default, with a step-cost model): the slack of request i is
// d_i - now - (its remaining steps each alone on the group), the delay it can absorb and
// still finish in time; on-time requests are ordered by deadline (EDF), late ones (negative
// chain slack) after them. Without it the key is slack_s at the group's expected step time,
// which in a burst counts the refreshes of everyone else into each request's own steps,
// reads negative for most requests, and leaves the slack budget nothing to protect.
//
// Slack budget (least slack with a step-cost model): a step is atomic, so a long refresh
// (up to ~100 ms for a 4k canvas on one H100) delays every request batched with it. Requests
// are added in key order; adding request j raises the step time by d_j (step-cost model), and
// j is added only if d_j fits the remaining slack of every on-time request already in the
// batch (their budget shrinks by d_j). A deferred request's slack shrinks while it waits, so
// it moves to the front of the order and cannot starve.
//
// One refresh at a time (slack budget only): a second refresh joins a step only if it
// lengthens the step by at most `refresh_join_growth` (10 %) of it. The budget alone would
// let it in whenever the batch's slack absorbs it, and then the whole batch waits for both.
// A real refresh is compute-bound, so it costs about the same in the next step (its weight
// reads hide under its compute): run after the first, that one finishes earlier and every
// reuse request in the group takes a step in between. Refreshes that are nearly free to add
// (short ones in a memory-bound step) still join (docs/policies.md).
#include "policies/quality.hpp"
#include "policies/snapshot.hpp"
#include "policies/step_cost.hpp"

#include <string>
#include <vector>

namespace dls::policy {

class curve_cache;  // predict.hpp

enum class queue_order { fcfs, least_slack };

struct scheduler_config {
  queue_order order = queue_order::least_slack;
  int token_budget = 8192;    // query rows per step (refresh = P + G rows, reuse = B rows)
  int max_batch = 256;        // requests per step
  bool demote_late = true;
  bool slack_budget = true;   // least slack only, and only when a cost model is passed
  bool admission_control = true;  // least slack with a cost model: EDF test before admitting
  /// Least slack with a cost model: order on-time requests by deadline (EDF) and give each
  /// the slack of its own chain, d - now - (remaining steps each alone on the group), as its
  /// budget. Off: order by and budget with slack_s at the group's expected step time.
  bool chain_slack = true;
  /// Layer-split refresh (slack budget only): > 0 splits a refresh into this many layer ranges
  /// (the model's layer count). A refresh whose whole step would exceed the slack budget joins
  /// with the longest range of layers that lengthens the step by at most
  /// min(budget, refresh_split_growth x step) instead of waiting; 0: refreshes run whole.
  int refresh_split = 0;
  double refresh_split_growth = 0.02;
  /// Slack budget only: a refresh (or range of one) beyond the step's first joins only if it
  /// lengthens the step by at most this fraction of it; otherwise it waits for the next step.
  double refresh_join_growth = 0.1;
  /// Least slack with a cost model: a request that can no longer meet its deadline (negative
  /// chain slack) gets a renewed one, its deadline plus the smallest whole number of SLO
  /// windows (this factor x (deadline - arrival)) that it can still meet, and competes in
  /// deadline order with it. So it is served within about one more window once the backlog
  /// before its renewed deadline clears, instead of waiting for the queue to empty.
  /// 0 (default; measured, docs/policies.md): late requests go after every on-time one,
  /// shortest remaining work first, except for the oldest missed request below.
  double missed_renewal = 0.0;
  /// Least slack: the oldest request that can no longer meet its deadline leads every step's
  /// order (so it is always taken) and is admitted whenever a slot and KV room are free, so a
  /// missed request's wait is bounded by the missed requests that arrived before it, not by
  /// the arrivals that keep coming after it. The other overdue requests (missed, past the grace
  /// below) follow the on-time ones in arrival order, before the late ones still within their
  /// grace (shortest remaining work first): for them only the latency is left to win, and its
  /// tail is shortest oldest first.
  bool oldest_missed_first = true;
  /// ... counting only requests past their deadline by at least this many SLO windows
  /// (deadline - arrival); 0: every request that can no longer meet it.
  double missed_grace = 1.0;
};

/// The deadline a request is scheduled against: its own, or for a request whose fastest
/// finish `now + best_s` misses it, the renewal above (its own when missed_renewal <= 0).
double effective_deadline_s(const request_view& r, double now, double best_s, const scheduler_config& cfg);

/// Slack of a request: deadline - now - remaining_steps(tau) x step_s.
double slack_s(const request_view& r, double now, const quality_model& q, double step_s);
/// The same on a decision's curve reads (predict.hpp).
double slack_s(const request_view& r, double now, curve_cache& q, double step_s);

/// Fills `out` with indices into `active` forming the next step. Requests are taken in key
/// order; one that would overflow the token budget is skipped and smaller ones after it may
/// still fill the gap. The first request is always taken, so a step never starves.
/// `cost` and `tp` enable the slack budget (nullptr: token budget only). With `shares`, it is
/// filled in step with `out`: the fraction of the model's layers each request runs this step
/// (1 - refresh_done unless a layer-split refresh was cut to fit the budget).
/// `waiting`: requests queued for the group and not admitted yet.
///
/// The batching economy: deferring request j lets the requests already in the step finish
/// d_j sooner (d_j: what j adds to the step), but loses what batching saves j, c({j}) - d_j
/// (c({j}): its step alone), and that extra group time delays every request still present
/// when j runs later, if the group is busy then. The budget (and the one-refresh rule) may
/// therefore defer j only if riders x d_j > busy x present x (c({j}) - d_j) + own_j, with
/// riders the requests already taken, present the active and `waiting` ones, busy 1 when more
/// work is ready than one step takes (`waiting` > 0, or the candidates exceed max_batch or the
/// token budget), else `utilization`, the group's predicted utilization from its recent arrivals
/// (policy::predicted_utilization; 0: an idle group, where the budget alone decides), and own_j
/// what deferring a late j costs it (only its latency is left to win; 0 for an on-time j): the
/// step it waits out, or, once past its deadline, how far past it already is. A deferral is
/// rarely the last: a late request that lost once keeps losing to each new batch of on-time
/// riders, and counting only the one step let it wait out whole bursts (the suite's p99 up to
/// 1.9x static's). Charged its lateness so far, it is deferred at most until that exceeds what
/// the riders gain, so its wait is bounded by the riders' gain (docs/policies.md, "The tail").
/// Memory-bound and overhead-bound requests (a reuse step on a GPU, any step of a small model
/// on a CPU, where the step's fixed part dominates) therefore fill the step of a busy group;
/// a long compute-bound refresh can still wait for one while few requests share the group.
void form_batch(const std::vector<request_view>& active, double now, const scheduler_config& cfg,
                const quality_model& q, double step_s, std::vector<int>& out,
                const step_cost_model* cost = nullptr, int tp = 1,
                std::vector<double>* shares = nullptr, std::size_t waiting = 0, double utilization = 0);

/// Capacity left in a group for admitting requests.
struct admission_room {
  int slots = 0;              // max_active - active
  double kv_tokens = 0;       // free canvas tokens of KV memory
};

/// Indices into `queued`, in admission order, of the requests to activate now. Requests are
/// considered in key order and admitted while slots and KV memory remain; with least slack,
/// late requests are considered only after all others.
///
/// Admission control (least slack, cost model and `active` given): with work_i the seconds of
/// saturated group time request i still needs (marginal step costs, predict.hpp), the on-time
/// active requests and on-time candidates are walked in deadline order (EDF); whenever a prefix
/// overruns, sum_{d_i <= d_j} work_i > d_j - now, the candidate with the most work in it is
/// deferred (Moore-Hodgson, which keeps the most jobs on time on one machine). A deferred
/// candidate waits in the queue (retried every step, or it becomes late).
/// Late requests are admitted only when no on-time candidate had to wait, so best-effort work
/// never displaces work that can still meet its deadline.
std::vector<int> admit(const std::vector<request_view>& queued, admission_room room, double now,
                       const scheduler_config& cfg, const quality_model& q, double step_s,
                       const step_cost_model* cost = nullptr, int tp = 1,
                       const std::vector<request_view>* active = nullptr);

/// A group's admission before a step, live (decide_step) and simulated: admit, and an idle
/// group (nothing active) that admitted nobody takes its first queued request in key order all
/// the same, without admission control and whatever its KV room: deferring work onto an idle
/// device helps nobody.
std::vector<int> admit_to_group(const std::vector<request_view>& queued, admission_room room, double now,
                                const scheduler_config& cfg, const quality_model& q, double step_s,
                                const step_cost_model* cost, int tp, const std::vector<request_view>& active);

/// on_miss: reject (a strict SLO). Why `r`, arriving at a group that holds `active` and
/// `queued`, cannot meet its deadline, or "" when it still can. It cannot when even alone at
/// `tau_min` its remaining steps outlast the time left, or when the work the group owes before
/// it in the scheduling order (FCFS: everyone; least slack: on-time requests with earlier
/// effective deadlines), in seconds of saturated group time and at most r's own number of
/// remaining steps of each (the steps they can share with r), plus its own at `tau_min`, does
/// not fit before its deadline. An estimate: a request that passes may still miss, and one
/// refused might have made it (docs/policies.md gives the measured effect).
std::string refuse_if_late(const request_view& r, const std::vector<request_view>& active,
                           const std::vector<request_view>& queued, double now,
                           const scheduler_config& cfg, const quality_model& q,
                           const step_cost_model& cost, int tp, double tau_min);

}  // namespace dls::policy
