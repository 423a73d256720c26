#include "policies/predict.hpp"

#include <algorithm>
#include <cmath>

namespace dls::policy {

curve_point read_curve(const quality_model& q, int block_len, double tau) {
  curve_point p;
  p.block_len = block_len;
  p.tau = tau;
  p.tokens_per_step = q.tokens_per_step(tau);
  p.per_block = block_len <= 0 ? 0.0 : std::max(1.0, block_len / p.tokens_per_step);  // q.steps_for
  if (q.refresh_interval() > 0) p.refresh_share = q.refresh_share(block_len, tau);
  return p;
}

step_counts remaining_steps(const request_view& r, const curve_point& p, const quality_model& q) {
  step_counts c;
  const int blocks_left = r.blocks_total() - r.blocks_done;
  if (blocks_left <= 0) return c;
  auto steps_for = [&](int masks) { return masks <= 0 ? 0.0 : std::max(1.0, masks / p.tokens_per_step); };
  const double per_block = p.per_block;
  if (q.refresh_interval() <= 0) {
    if (r.steps_in_block == 0) {
      c.refresh = blocks_left;
      c.reuse = blocks_left * (per_block - 1.0);
    } else {
      c.refresh = blocks_left - 1;
      c.reuse = steps_for(r.masks_left_in_block) + (blocks_left - 1) * (per_block - 1.0);
    }
    return c;
  }
  // Refreshes inside a block too: a whole block refreshes on a share of its steps.
  const double per_block_refresh = per_block * p.refresh_share;
  const int whole = r.steps_in_block == 0 ? blocks_left : blocks_left - 1;
  c.refresh = whole * per_block_refresh;
  c.reuse = whole * std::max(0.0, per_block - per_block_refresh);
  if (r.steps_in_block > 0) {
    const double left = steps_for(r.masks_left_in_block);
    const double refresh = q.refreshes_left_in_block(r.steps_in_block, left);
    c.refresh += refresh;
    c.reuse += std::max(0.0, left - refresh);
  }
  return c;
}

step_counts remaining_steps(const request_view& r, double tau, const quality_model& q) {
  if (r.blocks_total() - r.blocks_done <= 0) return {};
  return remaining_steps(r, read_curve(q, r.block_len, tau), q);
}

step_counts curve_cache::remaining_steps(const request_view& r, double tau) {
  for (std::size_t i = 0; i < n_points_; ++i)
    if (points_[i].tau == tau && points_[i].block_len == r.block_len) return policy::remaining_steps(r, points_[i], *q_);
  if (n_points_ == max_points) return policy::remaining_steps(r, tau, *q_);
  points_[n_points_] = read_curve(*q_, r.block_len, tau);
  return policy::remaining_steps(r, points_[n_points_++], *q_);
}

double curve_cache::accuracy(double tau) {
  for (std::size_t i = 0; i < n_accuracy_; ++i)
    if (accuracy_[i].first == tau) return accuracy_[i].second;
  const double a = q_->accuracy(tau);
  if (n_accuracy_ < max_points) accuracy_[n_accuracy_++] = {tau, a};
  return a;
}

void group_load::add(int canvas_len) {
  requests += 1;
  sum_canvas += canvas_len;
  sum_canvas_sq += static_cast<double>(canvas_len) * canvas_len;
}

void group_load::remove(int canvas_len) {
  requests -= 1;
  sum_canvas -= canvas_len;
  sum_canvas_sq -= static_cast<double>(canvas_len) * canvas_len;
  if (requests <= 0) *this = group_load{};
}

double expected_step_s(const step_cost_model& m, int tp, const group_load& g, int block_len,
                       double steps_per_block, double token_budget) {
  if (g.requests <= 0) return 0.0;
  const double f = 1.0 / std::max(1.0, steps_per_block);  // refresh probability per step
  const double b = block_len;
  batch_totals t;
  t.requests = g.requests;
  t.key_rows = g.sum_canvas;
  t.logit_rows = g.requests * b;
  t.query_rows = g.requests * b + f * (g.sum_canvas - g.requests * b);
  t.qk = b * g.sum_canvas + f * (g.sum_canvas_sq - b * g.sum_canvas);
  t.refresh_items = f * g.requests;
  const double step = m.step_seconds(tp, t);
  return t.query_rows > token_budget ? step * t.query_rows / token_budget : step;
}

double held_step_s(const step_cost_model& m, int tp, group_load g, int block_len, double steps_per_block,
                   double token_budget, int max_batch) {
  const double stretch = std::max(1.0, g.requests / std::max(1, max_batch));
  g.requests /= stretch;
  g.sum_canvas /= stretch;
  g.sum_canvas_sq /= stretch;
  return stretch * expected_step_s(m, tp, g, block_len, steps_per_block, token_budget);
}

batch_totals group_reference_batch(double sum_canvas, double requests, int block_len, double token_budget,
                                   double steps_per_block) {
  const int mean = requests > 0 ? static_cast<int>(sum_canvas / requests) : block_len;
  return saturated_batch(mean, block_len, token_budget, steps_per_block);
}

double isolated_latency_s(const step_cost_model& m, const quality_model& q, int prompt_len,
                          int gen_len, int block_len, double tau, int tp) {
  const int canvas = prompt_len + gen_len;
  const double blocks = block_len > 0 ? gen_len / block_len : 0;
  const double per_block = q.steps_for(block_len, tau);
  batch_totals ref, reu;
  ref.add(step_item_of(step_kind::refresh, canvas, block_len));
  reu.add(step_item_of(step_kind::reuse, canvas, block_len));
  if (q.refresh_interval() <= 0)
    return blocks * (m.step_seconds(tp, ref) + (per_block - 1.0) * m.step_seconds(tp, reu));
  const double refreshes = per_block * q.refresh_share(block_len, tau);
  return blocks * (refreshes * m.step_seconds(tp, ref) + std::max(0.0, per_block - refreshes) * m.step_seconds(tp, reu));
}

batch_totals saturated_batch(int canvas_len, int block_len, double token_budget,
                             double steps_per_block) {
  // n requests of length L, a refresh fraction f of them per step, fill the budget:
  // n (B + f (L - B)) = budget.
  const double f = 1.0 / std::max(1.0, steps_per_block);
  const double per = block_len + f * (canvas_len - block_len);
  const double n = std::max(1.0, token_budget / std::max(1.0, per));
  batch_totals t;
  t.requests = n;
  t.key_rows = n * canvas_len;
  t.logit_rows = n * block_len;
  t.query_rows = n * per;
  t.qk = n * (block_len * static_cast<double>(canvas_len) +
              f * (static_cast<double>(canvas_len) * canvas_len - block_len * static_cast<double>(canvas_len)));
  t.refresh_items = n * f;
  return t;
}

marginal_cost marginal_step_cost(const step_cost_model& m, int tp, const batch_totals& ref,
                                 int canvas_len, int block_len) {
  return marginal_step_cost(m, tp, ref, m.step_seconds(tp, ref), canvas_len, block_len);
}

marginal_cost marginal_step_cost(const step_cost_model& m, int tp, const batch_totals& ref, double base,
                                 int canvas_len, int block_len) {
  marginal_cost c;
  batch_totals t = ref;
  t.add(step_item_of(step_kind::refresh, canvas_len, block_len));
  c.refresh_s = std::max(0.0, m.step_seconds(tp, t) - base);
  t = ref;
  t.add(step_item_of(step_kind::reuse, canvas_len, block_len));
  c.reuse_s = std::max(0.0, m.step_seconds(tp, t) - base);
  return c;
}

}  // namespace dls::policy
