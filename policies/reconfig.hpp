#pragma once
// Quality-aware reconfiguration optimizer: which multiset of TP degrees each node's devices
// form, and at which tau level the cluster plans to run, for the forecast load.
//
// Group model (evaluate_group). A group of degree k at tau serves at most mu_k requests/s
// (saturated batches, step-cost model) and a request of class c alone takes l_kc. Treating a
// batching group as a processor-sharing server, a class-c request at utilisation rho takes
// l_kc / (1 - rho) and meets its deadline d_c = S x isolated latency (TP 1, ref tau) iff
// rho <= rho_kc = 1 - l_kc / d_c. rho*_k is the largest rho at which classes holding >= target
// of the arrivals still meet; the group's SLO capacity is C_k = mu_k x min(rho*_k, u_max).
//
// Problem. Nodes i = 1..N each pick a partition p of their devices into allowed TP degrees
// (8 GPUs: {8}, {4,4}, {4,2,2}, ..., {1 x 8}: 10 partitions) and the cluster a tau level.
//   maximize  accuracy(tau)                                           (quality model)
//   subject to  C = sum_i C(p_i, tau) >= lambda  (predicted attainment >= target everywhere)
//   then minimize  J = (sum_g C_g l_g / C) / (1 - lambda / C)   (predicted mean latency)
// where l_g is group g's mean isolated latency over the mix. A plan replaces the current
// layout only if what it gains over the time it will be kept (horizon_s) exceeds what the
// regroup costs while the changed nodes serve nothing (switch_pays, below), or if the current
// layout is infeasible and the plan has more capacity.
//
// Solution. Stage 1 enumerates the partitions exactly and evaluates each (degree, tau).
// Stage 2, per tau level from best accuracy down, is an exact dynamic program over nodes on
// total capacity in U units of the cluster's largest possible capacity (capacities rounded
// down, so a plan found is feasible): cell u keeps the least sum C_g l_g reaching u, then J is
// evaluated for every u >= lambda. The first tau level with a feasible plan wins. If none is
// feasible, no layout meets the target at lambda; two cases:
//  - a burst (the sustained rate load.mean_rate is below utilization_max x the saturated
//    throughput of the fastest layout): the plan maximizes predicted attainment min(1, C / lambda),
//    i.e. the SLO capacity C = sum C_g, at the lowest level, among the layouts that keep up
//    (utilization_max x sum mu_g >= mean_rate: one that does not builds a backlog that never
//    drains); exact dynamic program over nodes on throughput. It replaces a current layout that
//    keeps up only if the attainment it gains over horizon_s exceeds the attainment lost while
//    the changed nodes regroup (switch_pays), and one that does not if the throughput gained
//    repays what the regroup takes away (the sustained test against mean_rate / utilization_max);
//  - sustained overload (no layout keeps up): the backlog grows whatever the layout, so the
//    plan maximizes saturated throughput sum mu_g at the lowest level instead.
// Cost: O(T (N P U + |K| (B + M log M))) time and O(N U) memory for T tau levels, N nodes,
// P partitions per node (10 for 8 devices in degrees {1,2,4,8}), U capacity units, |K|
// degrees, B batch sizes and M length classes. At 1,024 devices (N = 128, P = 10, U = 2000,
// T = 5): at most 12.8 M DP cell updates; docs/policies.md gives the measured time.
#include "common/layout.hpp"
#include "policies/quality.hpp"
#include "policies/snapshot.hpp"
#include "policies/step_cost.hpp"

#include <vector>

namespace dls::policy {

using partition = common::tp_layout;  // TP degrees, non-increasing, summing to the node size

/// All multisets of `degrees` summing to `devices`, largest parts first, in a fixed order.
std::vector<partition> enumerate_partitions(int devices, std::vector<int> degrees);

struct reconfig_config {
  double slo_scale = 2.0;          // deadline = arrival + S x (isolated latency (TP 1, ref tau) + overhead)
  // The path overhead per request outside its group (seconds; slo_deadline_s): it is in every
  // deadline and in every request's latency, so a group has S x (solo + overhead) - overhead.
  double request_overhead_s = 0;
  double ref_tau = 0.9;
  std::vector<double> tau_levels{0.9, 0.85, 0.8, 0.75, 0.7};  // best accuracy first
  double attainment_target = 0.9;  // fraction of arrivals predicted to meet the SLO
  double utilization_max = 0.9;    // never plan a group beyond this utilisation
  int capacity_units = 2000;
  // The switching test (switch_pays): a changed node serves nothing for regroup_s seconds
  // (drain and re-initialisation), at most nodes_at_once nodes regroup together (0: all that
  // change), and the plan's gain counts for horizon_s seconds: the caller's dwell time, but no
  // longer than the history the forecast comes from (a forecast from 5 s of arrivals is no
  // evidence for the 55 s after them).
  double regroup_s = 2.0;
  double horizon_s = 60.0;
  int nodes_at_once = 0;
  int max_batch = 256;
  double token_budget = 8192;
};

/// One group type's throughput and latency for the forecast length mix.
struct group_perf {
  int tp = 1;
  double tau = 0.9;
  double max_rps = 0;        // mu: saturated throughput
  double batch = 0;          // the batch size reaching it
  double rho_star = 0;       // utilisation up to which >= target of arrivals meet the SLO
  double capacity_rps = 0;   // C = mu x min(rho*, utilization_max)
  double latency_s = 0;      // mean isolated latency over the mix (batch 1)
};
group_perf evaluate_group(const step_cost_model& m, const quality_model& q,
                          const std::vector<length_class>& mix, int tp, double tau,
                          const reconfig_config& cfg);

struct reconfig_plan {
  std::vector<partition> nodes;    // chosen partition per node
  double tau = 0.9;                // planned tau level
  double capacity_rps = 0;
  double demand_rps = 0;
  double latency_score = 0;        // J, predicted mean latency (s)
  double current_score = 0;        // J of the current layout at the same tau (inf: infeasible)
  int changed_nodes = 0;
  bool feasible = false;
  bool switch_layout = false;      // hysteresis passed: apply `nodes`
  bool burst = false;              // infeasible, not sustained: SLO capacity maximized
};

/// The switching test, from the predicted load against the capacities before, during and after
/// a regroup. `lambda` is the forecast rate; the current layout has SLO capacity `c_cur` and
/// sum C_g l_g `wl_cur`; the plan has `c_new`, `wl_new`; `changed` nodes change and
/// their groups hold `c_changed` of c_cur and `wl_changed` of wl_cur. The regroup runs in
/// waves of nodes_at_once nodes, each regroup_s long, with those nodes' capacity gone.
///  - latency (burst = false): the latency-seconds the plan saves over horizon_s,
///    lambda x horizon_s x (J_cur - J_new), against those the waves add, lambda x T x (J_wave -
///    J_cur) while the rest keeps up (lambda < C_wave), else the excess arrivals
///    E = (lambda - C_wave) T waiting T / 2 and then E / (2 (c_new - lambda)) to drain;
///  - burst: requests on time, lambda x horizon_s x (A(c_new) - A(c_cur)) against
///    lambda x T x (A(c_cur) - A(C_wave)), with A(C) = min(1, C / lambda).
/// T is the waves' total time. True iff the gain is larger.
bool switch_pays(double lambda, double c_cur, double wl_cur, double c_new, double wl_new, int changed,
                 double c_changed, double wl_changed, bool burst, const reconfig_config& cfg);

/// Solves the problem above. `current[i]` is node i's partition now (may be empty: no
/// preference). Pure and deterministic.
reconfig_plan optimize_layout(const std::vector<int>& node_devices,
                              const std::vector<partition>& current, const forecast& load,
                              const step_cost_model& m, const quality_model& q,
                              const reconfig_config& cfg);

/// A node as the choice of which to drain sees it: whether the plan changes its layout, whether
/// it may change now (not regrouping already, its layout older than the minimum dwell), and the
/// requests its groups hold (running and queued).
struct drain_candidate {
  bool changes = false;
  bool may_change = true;
  std::size_t held = 0;
};

/// Which nodes to drain now for a plan, as indices into `nodes`: those that change and may,
/// the emptiest first (the fewest requests to wait for or move), at most `at_once`. Capacity
/// then drops by at most `at_once` nodes while they drain.
std::vector<int> nodes_to_drain(const std::vector<drain_candidate>& nodes, int at_once);

/// How many of `nodes` nodes may drain at once (`reconfigure.max_fraction` of them, at least
/// one): the live reconfigurer and the simulator both drain and plan with it.
int nodes_at_once(double max_fraction, std::size_t nodes);

}  // namespace dls::policy
