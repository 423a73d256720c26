#pragma once
// Predictions every policy shares: how many steps a request still needs at a given tau, how
// long a group's batch step takes, and the isolated latency that defines the SLO.
#include "policies/quality.hpp"
#include "policies/snapshot.hpp"
#include "policies/step_cost.hpp"

#include <array>
#include <cstddef>
#include <utility>

namespace dls::policy {

/// Expected remaining steps: the rest of the current block at `tau` (a refresh first if the
/// block has not started), then (blocks left - 1) blocks of max(1, B / m(tau)) steps each.
struct step_counts {
  double refresh = 0;
  double reuse = 0;
  double total() const { return refresh + reuse; }
};
step_counts remaining_steps(const request_view& r, double tau, const quality_model& q);

/// The quality curve read at one tau for one block length: all remaining_steps needs of it.
struct curve_point {
  int block_len = 0;
  double tau = 0;
  double tokens_per_step = 1;  // q.tokens_per_step(tau)
  double per_block = 0;        // q.steps_for(block_len, tau)
  double refresh_share = 0;    // q.refresh_share(block_len, tau); 0 without refresh_interval
};
curve_point read_curve(const quality_model& q, int block_len, double tau);

/// remaining_steps(r, p.tau, q) from a point read at r.block_len: arithmetic alone, the same
/// figures to the bit (remaining_steps(r, tau, q) is this on a fresh read).
step_counts remaining_steps(const request_view& r, const curve_point& p, const quality_model& q);

/// The curve points one decision reads, each read once. A decision weighs every request of a
/// group at a handful of taus (the controller's levels), so over a long queue this turns a few
/// interpolations of the curve per request into a short search. Holds at most `max_points`
/// (inline: a decision of a small group allocates nothing); beyond that it reads the curve each
/// time.
class curve_cache {
 public:
  explicit curve_cache(const quality_model& q) : q_(&q) {}
  step_counts remaining_steps(const request_view& r, double tau);
  double accuracy(double tau);

 private:
  static constexpr std::size_t max_points = 12;
  const quality_model* q_;
  std::array<curve_point, max_points> points_;
  std::size_t n_points_ = 0;
  std::array<std::pair<double, double>, max_points> accuracy_;  // (tau, accuracy)
  std::size_t n_accuracy_ = 0;
};

/// Running sums over a group's requests, kept incrementally by the caller.
struct group_load {
  double requests = 0;
  double sum_canvas = 0;      // sum of P + G
  double sum_canvas_sq = 0;   // sum of (P + G)^2, for the attention term
  void add(int canvas_len);
  void remove(int canvas_len);
};

/// Expected duration of one batch step of a group whose requests take one refresh every
/// `steps_per_block` steps: the roofline of the expected batch totals. When the expected
/// query rows exceed the token budget each request is stepped only budget / rows of the time,
/// so its per-step wall time stretches by that factor; this returns that stretched time.
double expected_step_s(const step_cost_model& m, int tp, const group_load& g, int block_len,
                       double steps_per_block, double token_budget);

/// The same for a group that holds more active requests than one step takes (`max_batch`):
/// each step runs max_batch of them at the mean shape, and each request steps once every
/// n / max_batch steps, so its step time stretches by that factor. The step-time estimate of
/// every group decision, live (decide_step) and simulated.
double held_step_s(const step_cost_model& m, int tp, group_load g, int block_len, double steps_per_block,
                   double token_budget, int max_batch);

/// Latency of a request alone on a TP-`tp` group at `tau`, in expectation over the commit
/// draw: blocks x (one refresh + (s - 1) reuses), s = max(1, B / m(tau)); with the engine's
/// refresh_interval, s x refresh_share of them refresh (quality_model::refresh_share).
double isolated_latency_s(const step_cost_model& m, const quality_model& q, int prompt_len,
                          int gen_len, int block_len, double tau, int tp = 1);

/// Seconds of a saturated group's time one step of this request consumes: the cost it adds to
/// a batch already at `ref` (finite difference of the step-cost model).
struct marginal_cost {
  double refresh_s = 0;
  double reuse_s = 0;
};
marginal_cost marginal_step_cost(const step_cost_model& m, int tp, const batch_totals& ref,
                                 int canvas_len, int block_len);
/// The same with `ref`'s own step time given (m.step_seconds(tp, ref)), for many requests at once.
marginal_cost marginal_step_cost(const step_cost_model& m, int tp, const batch_totals& ref, double ref_s,
                                 int canvas_len, int block_len);

/// A group's reference batch for marginal costs, live (decide_step) and simulated: a
/// token-budget-full batch of the mean canvas of the `requests` it holds (canvas sum
/// `sum_canvas`), one block's canvas when it holds none.
batch_totals group_reference_batch(double sum_canvas, double requests, int block_len, double token_budget,
                                   double steps_per_block);

/// A token-budget-full reference batch of mean-length requests, for marginal costs.
batch_totals saturated_batch(int canvas_len, int block_len, double token_budget,
                             double steps_per_block);

}  // namespace dls::policy
