#include "policies/group_step.hpp"

#include "policies/overload.hpp"
#include "policies/predict.hpp"

#include <algorithm>
#include <optional>

namespace dls::policy {

group_policy make_group_policy(const policy_set& set, const group_knobs& k) {
  group_policy p;
  p.name = set.name;
  p.sched.order = set.order;
  p.sched.demote_late = set.demote_late;
  p.sched.token_budget = k.token_budget;
  p.sched.max_batch = k.max_batch;
  p.sched.refresh_split = 0;
  p.thr.tau_max = k.tau_max;
  p.thr.tau_min = std::min(k.tau_min, k.tau_max);
  p.thr.tau_step = k.tau_step;
  p.thr.per_request = set.tau_per_request;
  p.thr.load_cap = set.tau_load_cap;
  p.thr.accuracy_budget = k.accuracy_budget;
  p.max_active = k.max_active;
  p.refuse_overload = k.refuse_overload;
  p.reject_on_miss = k.reject_on_miss;
  return p;
}

namespace {

// Removes the requests of `gone` (in queue order) from `queued`.
void drop_from(std::vector<request_view>& queued, const std::vector<refusal>& gone) {
  if (gone.empty()) return;
  std::size_t w = 0, k = 0;
  for (std::size_t i = 0; i < queued.size(); ++i) {
    if (k < gone.size() && queued[i].id == gone[k].id) {
      ++k;
      continue;
    }
    queued[w++] = queued[i];
  }
  queued.resize(w);
}

// Strict SLOs: the fresh queued requests that cannot meet their deadline, in queue order, each
// judged against the active requests and the queued ones before it that stay.
std::vector<refusal> reject_unreachable(const group_snapshot& g, const group_policy& p, const step_cost_model& cost,
                                        const quality_model& q) {
  std::vector<refusal> out;
  std::vector<request_view> before;
  before.reserve(g.queued.size());
  for (const auto& r : g.queued) {
    if ((p.reject_on_miss || r.reject_on_miss) && std::find(g.fresh.begin(), g.fresh.end(), r.id) != g.fresh.end()) {
      auto why = refuse_if_late(r, g.active, before, g.now_s, p.sched, q, cost, g.group.tp, lowest_tau(r, p));
      if (!why.empty()) {
        out.push_back({r.id, std::move(why)});
        continue;
      }
    }
    before.push_back(r);
  }
  return out;
}

group_load load_of(const std::vector<request_view>& reqs) {
  group_load l;
  for (const auto& r : reqs) l.add(r.canvas_len());
  return l;
}

double step_estimate(const group_snapshot& g, const group_policy& p, const step_cost_model* cost,
                     const quality_model& q, double tau_cap) {
  if (g.active.empty() || !cost) return 0.0;
  const int block = g.active.front().block_len;
  return held_step_s(*cost, g.group.tp, load_of(g.active), block, q.steps_per_refresh(block, tau_cap),
                     p.sched.token_budget, p.sched.max_batch);
}

}  // namespace

step_decision decide_step(group_snapshot& g, const group_policy& p, const step_cost_model* cost,
                          const quality_model& q) {
  step_decision d;
  const int tp = g.group.tp;
  if (cost && !g.fresh.empty()) {
    d.rejected = reject_unreachable(g, p, *cost, q);
    drop_from(g.queued, d.rejected);
  }
  double step_s = step_estimate(g, p, cost, q, g.tau_cap);
  if (!g.group.draining && !g.queued.empty()) {
    admission_room room;
    room.slots = p.max_active - static_cast<int>(g.active.size());
    room.kv_tokens = g.kv_free_tokens;
    auto picked = admit_to_group(g.queued, room, g.now_s, p.sched, q, step_s, cost, tp, g.active);
    std::vector<bool> taken(g.queued.size(), false);
    for (int i : picked) {
      taken[static_cast<std::size_t>(i)] = true;
      g.active.push_back(g.queued[static_cast<std::size_t>(i)]);
      g.active.back().group = g.group.id;
      d.admitted.push_back(g.active.back().id);
    }
    std::size_t w = 0;
    for (std::size_t i = 0; i < g.queued.size(); ++i)
      if (!taken[i]) g.queued[w++] = g.queued[i];
    g.queued.resize(w);
    if (!d.admitted.empty()) step_s = step_estimate(g, p, cost, q, g.tau_cap);
  }
  d.tau_cap = g.tau_cap;
  // The group's reference batch (its mean canvas, saturated) for the marginal costs and the
  // predicted arrivals, built at most once per decision; and the arrivals' demand, updated once.
  std::optional<batch_totals> ref;
  auto reference = [&](int block) -> const batch_totals& {
    if (!ref)
    {
      auto held = load_of(g.active);
      for (const auto& r : g.queued) held.add(r.canvas_len());
      ref = group_reference_batch(held.sum_canvas, held.requests, block, p.sched.token_budget,
                                  q.steps_per_refresh(block, p.thr.tau_max));
    }
    return *ref;
  };
  const arrival_demand* demand = nullptr;
  if (!g.control_due) {
    // Every request keeps its tau until the next control.
  } else if (!p.tau_control() || !cost) {
    d.tau_cap = p.thr.tau_max;
    d.controlled = true;
    // Without tau control every request runs at the reference tau, unless the client chose.
    for (auto* list : {&g.active, &g.queued})
      for (auto& r : *list)
        if (!r.tau_pinned) r.tau = std::max(r.tau_floor, p.thr.tau_max);
  } else if (!(g.active.empty() && g.queued.empty())) {
    // Active and queued requests both load the group, so the cap sees both.
    std::vector<request_view> all;
    all.reserve(g.active.size() + g.queued.size());
    all.insert(all.end(), g.active.begin(), g.active.end());
    all.insert(all.end(), g.queued.begin(), g.queued.end());
    const int block = all.front().block_len;
    const auto& rb = reference(block);
    std::vector<marginal_cost> marg;
    marg.reserve(all.size());
    const double rb_s = cost->step_seconds(tp, rb);
    for (const auto& r : all) marg.push_back(marginal_step_cost(*cost, tp, rb, rb_s, r.canvas_len(), r.block_len));
    std::vector<double> tau;
    if (g.load && p.thr.load_cap) demand = &g.load->update(g.now_s, *cost, tp, rb, block, q, p.thr);
    const auto cap = control_group(all, marg, g.now_s, q, std::max(step_s, 0.0), p.thr, tau, g.ledger, demand);
    d.controlled = true;
    d.tau_cap = cap.cap;
    d.infeasible = cap.infeasible_prefixes;
    for (std::size_t i = 0; i < all.size(); ++i) {
      auto& r = i < g.active.size() ? g.active[i] : g.queued[i - g.active.size()];
      r.tau = tau[i];
    }
    step_s = step_estimate(g, p, cost, q, d.tau_cap);
  }
  if (p.refuse_overload && cost && d.controlled && !g.group.draining) {
    // Tau first: overload is answered by lowering tau, and only a group already running at a
    // lowered tau refuses. The controller and the shedding test model the backlog differently
    // (slack of each request against the group's work owed in arrival order), so in the first
    // controlled step of a burst the test can find a request hopeless at tau_min while the
    // controller still sees no need to lower anyone's tau. What counts is the tau of the requests
    // that stay: when the controller lowered only requests that the test then refuses, the group
    // would go on at the reference tau while it refuses, so shedding waits.
    auto lowered_tau = [&](const request_view& r) { return !r.tau_pinned && r.tau < p.thr.tau_max; };
    const bool no_lever = !p.tau_control() || p.thr.tau_min >= p.thr.tau_max;
    bool lowered = no_lever || std::any_of(g.active.begin(), g.active.end(), lowered_tau) ||
                   std::any_of(g.queued.begin(), g.queued.end(), lowered_tau);
    std::vector<refusal> refused;
    if (lowered) {  // the test runs only once some tau is down; the requests kept decide
      refused = shed_fresh(g, g.fresh, p, *cost, q);
      lowered = no_lever || std::any_of(g.active.begin(), g.active.end(), lowered_tau);
      std::size_t k = 0;  // refusals are in queue order
      for (const auto& r : g.queued) {
        if (k < refused.size() && refused[k].id == r.id) {
          ++k;
          continue;
        }
        lowered = lowered || lowered_tau(r);
      }
    }
    if (lowered) {
      d.refused = std::move(refused);
      drop_from(g.queued, d.refused);
    } else {
      d.shedding_deferred = !g.fresh.empty();
    }
  }
  d.step_s = step_s;
  // Candidates: every active request, or while draining only those inside a block.
  std::vector<request_view> cand;
  std::vector<std::size_t> cand_index;  // where each candidate is in g.active
  cand.reserve(g.active.size());
  cand_index.reserve(g.active.size());
  for (std::size_t i = 0; i < g.active.size(); ++i)
    if (!g.group.draining || g.active[i].next_kind == step_kind::reuse) {
      cand.push_back(g.active[i]);
      cand_index.push_back(i);
    }
  // The deferrals of the slack budget are weighed by how busy the group is predicted to be.
  double utilization = 0;
  if (cost && g.load && p.sched.order == queue_order::least_slack && p.sched.slack_budget && !g.active.empty()) {
    const int block = g.active.front().block_len;
    if (!demand) demand = &g.load->update(g.now_s, *cost, tp, reference(block), block, q, p.thr);
    utilization = predicted_utilization(*demand, d.tau_cap);
  }
  std::vector<int> batch;
  form_batch(cand, g.now_s, p.sched, q, step_s, batch, cost, tp, nullptr, g.queued.size() + g.unlisted_queued,
             utilization);
  d.batch.reserve(batch.size());
  d.batch_index.reserve(batch.size());
  for (int i : batch) {
    d.batch.push_back(cand[static_cast<std::size_t>(i)].id);
    d.batch_index.push_back(cand_index[static_cast<std::size_t>(i)]);
  }
  return d;
}

double slo_deadline_s(double arrival_s, double slo_scale, const step_cost_model& cost, const quality_model& q,
                      int prompt_len, int gen_len, int block_len, double tau_ref, double request_overhead_s) {
  return arrival_s +
         slo_scale * (isolated_latency_s(cost, q, prompt_len, gen_len, block_len, tau_ref, 1) + request_overhead_s);
}

}  // namespace dls::policy
