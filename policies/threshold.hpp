#pragma once
// Threshold controller: each request's confidence threshold tau from its slack, and a
// group-wide cap on tau when the predicted work would not fit before the deadlines.
//
// Per request: the highest level tau in [tau_min, tau_max] with
//     now + remaining_steps(tau) x step_s <= deadline,
// else tau_min (fewest steps). Lower tau commits more tokens per step, so fewer steps.
//
// Aggregate cap: order the group's requests (active and queued) by deadline; with
// work_i(c) = refresh_i(min(tau_i, c)) x m_ref,i + reuse_i(min(tau_i, c)) x m_reuse,i, the
// seconds of saturated group time request i still needs (marginal step costs, predict.hpp),
// prefix j is feasible iff sum_{i <= j} work_i(c) <= deadline_j - now (EDF schedulability).
// The cap is the highest level c whose count of infeasible prefixes equals the count at
// tau_min: lowering tau further rescues nobody. Requests that miss even alone at tau_min are
// left out of the test, so one hopeless request cannot drag everyone's tau down.
//
// Predicted arrivals (optional, arrival_demand): the work present is not all the work that
// must fit before a deadline. Requests that arrive later with shorter SLO windows fall due
// earlier, and EDF serves them first. With the group's forecast rate lambda (its own arrivals
// over a recent window, forecast.hpp) and those arrivals as the mix (n samples, SLO window
// D_k, work w_k(c) at the cap from the same marginal costs), prefix j must also fit
//     lambda / n x sum_k max(0, T_j - D_k) x w_k(c),    T_j = deadline_j - now,
// the work of the arrivals due by deadline_j (the demand-bound function of EDF). So the cap is
// set by the predicted load against the group's measured capacity (one second of saturated
// group time per second): when lambda x mean w(c) approaches 1 the far prefixes stop fitting
// at c and the cap comes down before the backlog exists, not after.
//
// Accuracy budget (optional, accuracy_budget = b >= 0): a quality SLO on the mean expected
// accuracy loss per request against tau_max, loss(tau) = acc(tau_max) - acc(tau). A request
// that has committed tokens at taus down to tau_low is charged loss(tau_low): the quality
// curve is measured on decodes at one tau throughout, and a request lowered for part of its
// answer loses about what it would lose lowered for all of it (shipped model, decodes switched
// from 0.9 to a lower tau after 1-3 steps: this charge predicts a median 1.03 of the measured
// loss, a share of loss(tau) per committed token 0.44; docs/policies.md). The per-token charge
// underestimates every request that ends early or is lowered only where its answer is. A ledger
// (accuracy_ledger, running state owned by the caller) earns b once per request that finishes,
// charges a commit at tau the rise from loss(tau_low) to loss(min(tau, tau_low)), and reserves
// that rise for the tau each unfinished request is planned at. A lowering that would overdraw
// the credit (earned - spent - reserved) is cut back to the lowest affordable level, so
// spent + reserved <= b x finished holds at every moment: the mean loss over the requests
// finished so far never exceeds b, and neither does the final mean. Raises (refunds) are
// applied first, then lowerings breadth first (every request that wants it goes one level
// down before any goes two), within a level on-time requests by deadline (EDF) and hopeless
// ones last. A request already charged at a level costs nothing more to keep there, and is
// never raised above its tau_low: the accuracy it was charged for does not come back (by this
// model), while every step a higher tau adds is paid.
#include "policies/forecast.hpp"
#include "policies/predict.hpp"
#include "policies/quality.hpp"
#include "policies/snapshot.hpp"

#include <vector>

namespace dls::policy {

struct threshold_config {
  double tau_min = 0.7;      // below 0.7 GSM8K accuracy collapses (Fast-dLLM Fig. 5)
  double tau_max = 0.9;      // the reference tau; above it accuracy gains < 0.1 point
  double tau_step = 0.05;
  bool per_request = true;   // false: every request keeps tau_max (before the cap)
  bool load_cap = true;
  // Mean expected accuracy loss per request against tau_max that tau control may spend
  // (fraction: 0.01 = one point); < 0: no budget, tau_min alone bounds the loss.
  double accuracy_budget = -1;
};

/// Expected accuracy lost by running at `tau` instead of `tau_ref` (>= 0; 0 at tau >= tau_ref).
double accuracy_loss(const quality_model& q, double tau, double tau_ref);

/// Answer tokens of the request not committed yet (its whole gen_len before it starts).
int uncommitted_tokens(const request_view& r);

/// The accuracy budget's running state (see above). Pure data: the caller owns it and calls
/// enter() for each request that arrives, commit() for each step's committed tokens,
/// finish() for each request that finishes and leave() for one that leaves unfinished
/// (dropped); control_group() moves the reservations.
struct accuracy_ledger {
  double budget = -1;      // threshold_config::accuracy_budget; < 0: unlimited
  double tau_ref = 0.9;    // threshold_config::tau_max
  double earned = 0;       // budget x finished
  double spent = 0;        // sum over requests of loss(tau_low)
  double reserved = 0;     // sum over unfinished requests of planned(r, r.tau)
  double finished = 0;
  bool enabled() const { return budget >= 0; }
  double credit() const { return earned - spent - reserved; }
  /// Loss the request adds to what it was charged if it commits at `tau` from now on:
  /// loss(min(tau, tau_low)) - loss(tau_low); 0 once nothing is left to commit.
  double planned(const request_view& r, double tau, const quality_model& q) const;
  void enter(const request_view& r, const quality_model& q);
  /// Charges `tokens` committed at `tau` (the tau the request was planned at) and returns the
  /// request's tau_low after them, which the caller keeps (also without a budget).
  double commit(const request_view& r, int tokens, double tau, const quality_model& q);
  void finish();
  void leave(const request_view& r, const quality_model& q);
  /// A new policy set takes over: it starts without banked credit. Requests that finished
  /// under a set without tau control earned credit nobody spent, and one that spends it would
  /// lose far more than the budget on the requests after the switch (3.2 to 4.7 points with a
  /// one-point budget, measured live after three policies that never lowered tau).
  void restart();
};

/// Levels from tau_max down to tau_min in tau_step steps (tau_min always included).
std::vector<double> tau_levels(const threshold_config& cfg);

/// The levels a plan for sustained operation may assume every request runs at (the
/// reconfiguration optimizer's): with an accuracy budget only those whose loss the budget
/// sustains for every request, and at least tau_max; tau control may still go lower for a few
/// requests while the budget has credit.
std::vector<double> planning_tau_levels(const threshold_config& cfg, const quality_model& q);

/// Highest level whose predicted finish meets the deadline; tau_min when none does.
double tau_from_slack(const request_view& r, double now, const quality_model& q, double step_s,
                      const threshold_config& cfg);

/// Work the group expects to arrive, at each tau level, for the cap's test (see above).
struct arrival_demand {
  double rate = 0;                        // requests/s the group expects
  std::vector<double> levels;             // tau_levels(cfg) it was computed for
  std::vector<double> window_s;           // SLO window of each sample, ascending
  std::vector<std::vector<double>> work_s;  // [level][sample]: seconds of saturated group time
  bool empty() const { return rate <= 0 || window_s.empty(); }
};

/// The group's predicted utilization: the demand's rate times its mean saturated work per
/// request at the level nearest `tau` (0 without demand).
double predicted_utilization(const arrival_demand& d, double tau);

/// Demand from `arrivals` (the group's own, oldest first): the rate is the mean over
/// `fc.window_s` before `now_s` (the cap looks a few seconds ahead, where the mean is the
/// expected demand), the mix the arrivals of that window, each costed whole at every level
/// against the reference batch `ref` of the group (marginal step costs, predict.hpp).
/// Arrivals without a known SLO window are left out of the mix.
arrival_demand demand_from_arrivals(const std::vector<arrival_record>& arrivals, double now_s,
                                    const forecast_config& fc, const step_cost_model& cost, int tp,
                                    const batch_totals& ref, int block_len, const quality_model& q,
                                    const threshold_config& cfg);

/// A group's arrivals and the demand last computed from them: running state the caller owns
/// (as the accuracy ledger), recorded as requests join the group's queue.
struct load_forecast {
  forecast_config cfg;                    // window_s: the history the demand comes from
  double refresh_s = 0.5;                 // recompute the demand at most this often
  std::vector<arrival_record> arrivals;   // oldest first, none older than cfg.window_s
  arrival_demand demand;
  double computed_s = -1e300;
  bool changed = false;                   // arrivals recorded since the last computation
  void record(const arrival_record& a);
  /// The demand at `now_s`, recomputed when arrivals came in and refresh_s has passed since the
  /// last computation (or when the window has emptied).
  const arrival_demand& update(double now_s, const step_cost_model& cost, int tp, const batch_totals& ref,
                               int block_len, const quality_model& q, const threshold_config& cfg);
};

struct cap_result {
  double cap = 1.0;
  int infeasible_prefixes = 0;   // at the chosen cap
  int excluded = 0;              // hopeless even alone at tau_min
};

/// The aggregate cap for one group. `marg[i]` are request i's marginal step costs and
/// `tau[i]` its tau from slack; `step_s` is the group's current step time (hopeless test).
/// `demand`: predicted arrivals counted in every prefix (null or empty: the work present only).
cap_result load_cap(const std::vector<request_view>& reqs, const std::vector<double>& tau,
                    const std::vector<marginal_cost>& marg, double now, const quality_model& q,
                    double step_s, const threshold_config& cfg, const arrival_demand* demand = nullptr);

/// Both stages: fills `tau_out[i]` = min(tau_from_slack, cap, tau_low) for each request, raised
/// to its tau_floor; a request with tau_pinned keeps its tau (and is planned at it by the cap). With a
/// ledger whose budget is enabled, the change from each request's current tau (`reqs[i].tau`)
/// to that target is then limited by the credit, and the ledger's reservations follow.
cap_result control_group(const std::vector<request_view>& reqs,
                         const std::vector<marginal_cost>& marg, double now,
                         const quality_model& q, double step_s, const threshold_config& cfg,
                         std::vector<double>& tau_out, accuracy_ledger* ledger = nullptr,
                         const arrival_demand* demand = nullptr);

}  // namespace dls::policy
