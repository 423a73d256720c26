#include "policies/overload.hpp"

#include "policies/predict.hpp"

#include <algorithm>
#include <cstdio>
#include <unordered_set>

namespace dls::policy {

double lowest_tau(const request_view& r, const group_policy& p) {
  if (r.tau_pinned) return r.tau;
  const double floor = p.tau_control() ? p.thr.tau_min : p.thr.tau_max;
  return std::max(floor, r.tau_floor);
}

namespace {

// Seconds of group time one request's step takes when the group runs full batches: a step of
// `batch` requests of the mean canvas, divided among them. The fixed part of a step (and the
// measured overhead the caller added to the profile) is shared by the batch the group really
// forms (max_batch), not by the token budget's worth of requests a GPU batch could hold.
struct step_share {
  double refresh_s = 0;
  double reuse_s = 0;
};

step_share share_of(const step_cost_model& cost, int tp, int canvas, int block, int batch) {
  batch_totals ref, reu;
  for (int i = 0; i < batch; ++i) {
    ref.add(step_item_of(step_kind::refresh, canvas, block));
    reu.add(step_item_of(step_kind::reuse, canvas, block));
  }
  return {cost.step_seconds(tp, ref) / batch, cost.step_seconds(tp, reu) / batch};
}

double work_at(const request_view& r, double tau, const quality_model& q, const step_share& s) {
  const auto c = remaining_steps(r, tau, q);
  return c.refresh * s.refresh_s + c.reuse * s.reuse_s;
}

double alone_s(const request_view& r, double tau, const quality_model& q, const step_cost_model& cost, int tp) {
  return work_at(r, tau, q, share_of(cost, tp, r.canvas_len(), r.block_len, 1));
}

step_share share_for(const group_snapshot& g, const group_policy& p, const step_cost_model& cost) {
  double canvas = 0;
  const std::size_t n = g.active.size() + g.queued.size();
  for (const auto* list : {&g.active, &g.queued})
    for (const auto& r : *list) canvas += r.canvas_len();
  const auto& any = g.active.empty() ? g.queued.front() : g.active.front();
  const int mean_canvas = static_cast<int>(canvas / static_cast<double>(n) + 0.5);
  const int batch = std::max(1, std::min(p.sched.max_batch, static_cast<int>(n)));
  return share_of(cost, g.group.tp, mean_canvas, any.block_len, batch);
}

}  // namespace

double backlog_s(const group_snapshot& g, const group_policy& p, const step_cost_model& cost, const quality_model& q) {
  if (g.active.empty() && g.queued.empty()) return 0;
  const auto share = share_for(g, p, cost);
  double owed = 0;
  for (const auto* list : {&g.active, &g.queued})
    for (const auto& r : *list) owed += work_at(r, r.tau, q, share);
  return owed;
}

std::string refuse_at_placement(double backlog, double slo_s, double grace) {
  if (slo_s <= 0) return {};
  const double limit = (1 + grace) * slo_s;
  if (backlog <= limit) return {};
  char why[200];
  std::snprintf(why, sizeof why,
                "the least loaded group owes %.3f s of work, over the %.3f s a request with a %.0f ms SLO may wait "
                "(its SLO and %.1f SLO windows late)",
                backlog, limit, 1e3 * slo_s, grace);
  return why;
}

std::vector<refusal> shed_fresh(const group_snapshot& g, const std::vector<std::uint64_t>& fresh,
                                const group_policy& p, const step_cost_model& cost, const quality_model& q) {
  std::vector<refusal> out;
  if (fresh.empty() || g.queued.empty()) return out;
  const std::unordered_set<std::uint64_t> is_fresh(fresh.begin(), fresh.end());
  const int tp = g.group.tp;
  const int batch = std::max(1, std::min(p.sched.max_batch, static_cast<int>(g.active.size() + g.queued.size())));
  const auto share = share_for(g, p, cost);
  // Everything the group holds is owed, late or not: under least slack a new request may be
  // served before the late ones, but then they wait longer still, and a backlog that only
  // grows is what overload is. So the work ahead is counted in arrival order, whatever order
  // the group serves in, each request at the tau the controller gave it.
  double owed = 0;
  for (const auto& r : g.active) owed += work_at(r, r.tau, q, share);
  for (const auto& r : g.queued) {
    const double lo = lowest_tau(r, p);
    if (!is_fresh.count(r.id)) {
      owed += work_at(r, r.tau, q, share);
      continue;
    }
    const double own = work_at(r, lo, q, share);
    const double finish = g.now_s + std::max(alone_s(r, lo, q, cost, tp), owed + own);
    // A request a little late is still served (late); one that would finish more than
    // missed_grace SLO windows after its deadline is refused: the scheduler's own line between
    // late and missed (scheduler.hpp).
    const double window = std::max(0.0, r.deadline_s - r.arrival_s);
    const double limit = r.deadline_s + p.sched.missed_grace * window;
    if (finish <= limit) {
      owed += work_at(r, r.tau, q, share);
      continue;
    }
    char why[320];
    std::snprintf(why, sizeof why,
                  "predicted to finish %.0f ms after its deadline even at tau %.2f, over the %.0f ms (%.1f SLO windows) "
                  "a late request may take: the group owes %.3f s of work before it (full batches of %d) and it "
                  "needs %.3f s",
                  1e3 * (finish - r.deadline_s), lo, 1e3 * p.sched.missed_grace * window, p.sched.missed_grace,
                  owed, batch, own);
    out.push_back({r.id, why});
  }
  return out;
}

}  // namespace dls::policy
