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
};

/// Levels from tau_max down to tau_min in tau_step steps (tau_min always included).
std::vector<double> tau_levels(const threshold_config& cfg);

/// Highest level whose predicted finish meets the deadline; tau_min when none does.
double tau_from_slack(const request_view& r, double now, const quality_model& q, double step_s,
                      const threshold_config& cfg);

struct cap_result {
  double cap = 1.0;
  int infeasible_prefixes = 0;   // at the chosen cap
  int excluded = 0;              // hopeless even alone at tau_min
};

/// The aggregate cap for one group. `marg[i]` are request i's marginal step costs and
/// `tau[i]` its tau from slack; `step_s` is the group's current step time (hopeless test).
cap_result load_cap(const std::vector<request_view>& reqs, const std::vector<double>& tau,
                    const std::vector<marginal_cost>& marg, double now, const quality_model& q,
                    double step_s, const threshold_config& cfg);

/// Both stages: fills `tau_out[i]` = min(tau_from_slack, cap) for each request.
cap_result control_group(const std::vector<request_view>& reqs,
                         const std::vector<marginal_cost>& marg, double now,
                         const quality_model& q, double step_s, const threshold_config& cfg,
                         std::vector<double>& tau_out);

}  // namespace dls::policy
