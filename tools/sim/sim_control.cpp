// The slower control loops of a simulation run: per-group tau control, the migration tick and
// the reconfiguration tick with drain and regroup. Each calls the policy and applies its answer.
#include "policies/forecast.hpp"
#include "policies/predict.hpp"
#include "policies/scheduler.hpp"
#include "sim/engine.hpp"
#include "sim/trace.hpp"

#include <algorithm>
#include <cmath>

namespace dls::sim::detail {

void engine::control(int gi) {
  auto& g = groups_[static_cast<std::size_t>(gi)];
  g.last_control = now_;
  g.dirty = false;
  if (thr_.per_request || thr_.load_cap) {
    // Active and queued requests both load the group, so the cap sees both.
    std::vector<policy::request_view> all;
    all.reserve(g.active.size() + g.queue.size());
    all.insert(all.end(), g.active.begin(), g.active.end());
    all.insert(all.end(), g.queue.begin(), g.queue.end());
    std::vector<policy::marginal_cost> marg(all.size());
    const auto ref = group_reference(g);
    const double ref_s = cost_.step_seconds(g.tp, ref);
    for (std::size_t i = 0; i < all.size(); ++i)
      marg[i] = policy::marginal_step_cost(cost_, g.tp, ref, ref_s, all[i].canvas_len(), all[i].block_len);
    std::vector<double> tau;
    policy::cap_result cap;
    stats_.control_policy_s += timed([&] {
      const policy::arrival_demand* demand =
          thr_.load_cap ? &g.arrivals.update(now_, cost_, g.tp, ref, cl_.block_len, cl_.quality, thr_)
                        : nullptr;
      cap = policy::control_group(all, marg, now_, cl_.quality, g.step_s, thr_, tau, &g.ledger, demand);
    });
    ++stats_.control_decisions;
    g.tau_cap = cap.cap;
    for (std::size_t i = 0; i < all.size(); ++i) {
      const bool is_active = i < g.active.size();
      auto& r = is_active ? g.active[i] : g.queue[i - g.active.size()];
      if (r.tau == tau[i]) continue;
      r.tau = tau[i];
      if (is_active && r.steps_in_block > 0)  // re-plan the rest of the block at the new tau
        rt_[r.id].steps_left = plan_steps(rt_[r.id], r.masks_left_in_block, r.tau);
    }
  }
}

// The step decision of a live group (policy::decide_step, called as actors/tp_group_step.cpp calls
// it): admission, tau control when due and the batch, in one call on the group's own lists.
// What is left here is the simulator's bookkeeping: the memory and load of the admitted
// requests, the steps left in a block whose tau changed, and migration's at-risk flag.
// A draining group drains as a live one: decide_step steps only the requests inside a block,
// and each request that reaches its refresh boundary leaves here as a canvas for the group the
// placement picks (leave_at_boundaries); with no group to go to it waits there, and the regroup
// carries it over to the node's new groups (maybe_regroup).
void engine::decide_as_live(int gi) {
  auto& g = groups_[static_cast<std::size_t>(gi)];
  g.batch.clear();
  g.shares.clear();
  if (g.draining) leave_at_boundaries(gi);
  if (g.active.empty() && g.queue.empty()) return;
  const bool tau_control = thr_.per_request || thr_.load_cap;
  policy::group_snapshot snap;
  snap.now_s = now_;
  snap.group.id = g.id;
  snap.group.node = g.node;
  snap.group.tp = g.tp;
  snap.group.draining = g.draining;
  snap.active.swap(g.active);
  snap.queued.swap(g.queue);
  snap.kv_free_tokens = g.kv_free;
  snap.tau_cap = g.tau_cap;
  snap.control_due = g.dirty || now_ - g.last_control >= cl_.control_interval_s;
  snap.ledger = &g.ledger;
  snap.load = &g.arrivals;
  // Strict requests no decision has seen: decide_step refuses those that cannot meet their
  // deadline. Their views, for the ledger should they leave.
  std::vector<policy::request_view> strict;
  for (const auto id : g.fresh) {
    rt_[id].judged = true;
    for (auto it = snap.queued.rbegin(); it != snap.queued.rend(); ++it)
      if (it->id == id) {
        strict.push_back(*it);
        break;
      }
  }
  snap.fresh.swap(g.fresh);
  g.fresh.clear();
  // The taus of the active requests inside a block, to re-plan the rest of a block whose tau changes.
  tau_before_.clear();
  if (snap.control_due && tau_control)
    for (const auto& r : snap.active)
      if (r.steps_in_block > 0) tau_before_.emplace_back(r.id, r.tau);
  std::sort(tau_before_.begin(), tau_before_.end());
  policy::step_decision d;
  stats_.batch_policy_s += timed([&] { d = policy::decide_step(snap, live_policy_, &cost_, cl_.quality); });
  ++stats_.batch_decisions;
  g.active.swap(snap.active);
  g.queue.swap(snap.queued);
  for (const auto& refused : d.rejected) {
    const auto r = std::find_if(strict.begin(), strict.end(), [&](const policy::request_view& v) { return v.id == refused.id; });
    g.ledger.leave(*r, cl_.quality);
    rt_[refused.id].rejected = true;
    ++stats_.rejected;
    if (stats_.first_rejection.empty()) stats_.first_rejection = refused.reason;
    --in_system_;
  }
  if (!d.rejected.empty()) touch(gi);
  for (std::size_t i = g.active.size() - d.admitted.size(); i < g.active.size(); ++i) {
    const auto& r = g.active[i];
    g.load.add(r.canvas_len());
    g.kv_free -= r.canvas_len();
    if (rt_[r.id].admit_s < 0) rt_[r.id].admit_s = now_;
  }
  g.tau_cap = d.tau_cap;
  g.step_s = d.step_s;
  if (d.controlled) {
    g.last_control = now_;
    g.dirty = false;
    ++stats_.control_decisions;
    for (const auto& r : g.active) {
      if (r.steps_in_block <= 0) continue;
      const auto it = std::lower_bound(tau_before_.begin(), tau_before_.end(), std::make_pair(r.id, -1.0));
      if (it != tau_before_.end() && it->first == r.id && it->second != r.tau)
        rt_[r.id].steps_left = plan_steps(rt_[r.id], r.masks_left_in_block, r.tau);
    }
  }
  // As a live group: the requests it admitted change its load, so its next decision controls.
  if (!d.admitted.empty()) g.dirty = true;
  g.batch.assign(d.batch_index.begin(), d.batch_index.end());
  for (const int i : g.batch) g.shares.push_back(policy::next_step_item(g.active[static_cast<std::size_t>(i)]).layer_share);
}

// A draining group's requests at their refresh boundary move on as canvases (their KV cache is
// stale there anyway), to the group the placement picks, as a live draining group hands them
// to the supervisor (actors/tp_group_drain.cpp, hand_back_at_boundaries).
void engine::leave_at_boundaries(int gi) {
  auto& g = groups_[static_cast<std::size_t>(gi)];
  bool moved = false;
  for (std::size_t i = g.active.size(); i-- > 0;) {  // descending: swap-removal keeps the rest in reach
    const auto& r = g.active[i];
    if (r.next_kind != policy::step_kind::refresh || rt_[r.id].leaving) continue;
    const int to = pick_group();
    if (to < 0) break;  // every group drains: it waits for the new layout
    auto& rt = rt_[r.id];
    rt.leave_to = to;
    rt.leave_cost = policy::move_cost(r, groups_[static_cast<std::size_t>(to)].node == g.node, 0.0, cl_.link);
    depart(gi, i);
    moved = true;
  }
  if (moved) touch(gi);
}

// -- migration --------------------------------------------------------------------------------

void engine::tick_migration() {
  std::vector<policy::group_summary> sums;
  std::vector<const std::vector<policy::request_view>*> reqs;
  std::vector<int> ids;
  // Every request a group holds, queued ones too (a queued request moves as a canvas), as the
  // live migrator reports them (actors/policy_view.cpp, migration_input_of).
  held_.resize(groups_.size());
  for (auto& g : groups_) {
    // A draining group's requests leave at their refresh boundaries (leave_at_boundaries) and
    // none may join it: the live migrator is given only the groups not being regrouped.
    if (!g.alive || g.draining) continue;
    auto& held = held_[static_cast<std::size_t>(g.id)];
    held.assign(g.active.begin(), g.active.end());
    held.insert(held.end(), g.queue.begin(), g.queue.end());
    policy::group_summary s;
    s.id = g.id;
    s.node = g.node;
    s.tp = g.tp;
    s.draining = g.draining;
    s.load = g.load;
    for (const auto& r : g.queue) s.load.add(r.canvas_len());
    s.active = static_cast<int>(g.active.size());
    s.kv_free_tokens = g.kv_free;
    s.step_s = g.step_s;
    policy::set_pace(s, held, now_, cl_.quality);
    sums.push_back(s);
    reqs.push_back(&held);
    ids.push_back(g.id);
  }
  std::vector<policy::migration_decision> moves;
  stats_.migration_policy_s += timed([&] {
    moves = policy::plan_migrations(sums, reqs, now_, cost_, cl_.quality, mcfg_, cl_.link);
  });
  ++stats_.migration_decisions;
  for (const auto& m : moves) {
    auto& src = groups_[static_cast<std::size_t>(m.from)];
    auto& rt = rt_[m.request];
    if (auto q = std::find_if(src.queue.begin(), src.queue.end(),
                              [&](const policy::request_view& r) { return r.id == m.request; });
        q != src.queue.end()) {  // not started there: it leaves now, as a canvas
      rt.leave_to = m.to;
      rt.leave_cost = m.cost;
      depart_queued(m.from, static_cast<std::size_t>(q - src.queue.begin()));
      touch(m.from);
      continue;
    }
    rt.leaving = true;
    rt.leave_to = m.to;
    rt.leave_cost = m.cost;
    // At its group's next step boundary, or now if no step of the group holds it.
    if (co_run_ ? rt.stream == 0 : !src.busy) {
      for (std::size_t i = 0; i < src.active.size(); ++i)
        if (src.active[i].id == m.request) {
          depart(m.from, i);
          break;
        }
      touch(m.from);
      start_step(m.from);
    }
  }
}

void engine::depart(int gi, std::size_t idx) {
  auto r = groups_[static_cast<std::size_t>(gi)].active[idx];
  groups_[static_cast<std::size_t>(gi)].ledger.leave(r, cl_.quality);
  remove_active(gi, idx);
  send_away(r);
}

void engine::depart_queued(int gi, std::size_t idx) {
  auto& q = groups_[static_cast<std::size_t>(gi)].queue;
  auto r = q[idx];
  groups_[static_cast<std::size_t>(gi)].ledger.leave(r, cl_.quality);
  q.erase(q.begin() + static_cast<std::ptrdiff_t>(idx));
  send_away(r);
}

void engine::send_away(policy::request_view r) {
  auto& rt = rt_[r.id];
  rt.leaving = false;
  rt.migrations += 1;
  ++stats_.migrations;
  // Rebuilding mid-block turns the next step into a refresh at the destination.
  if (rt.leave_cost.rebuild) r.next_kind = policy::step_kind::refresh;
  // Only the canvas and finished KV move: a split refresh in progress starts over there.
  r.refresh_done = 0;
  const int dst = rt.leave_to;
  auto& d = groups_[static_cast<std::size_t>(dst)];
  // Reserve the destination's memory now so concurrent moves cannot overfill it.
  d.kv_free -= r.canvas_len();
  d.load.add(r.canvas_len());
  pending_in_flight_.push_back(r);
  push(now_ + rt.leave_cost.seconds, ev::migrate_arrive, static_cast<std::uint32_t>(r.id),
       static_cast<std::uint32_t>(dst));
}

void engine::on_migrate_arrive(std::uint32_t id, int dst) {
  auto it = std::find_if(pending_in_flight_.begin(), pending_in_flight_.end(),
                         [&](const policy::request_view& r) { return r.id == id; });
  policy::request_view r = *it;
  *it = pending_in_flight_.back();
  pending_in_flight_.pop_back();
  auto& d = groups_[static_cast<std::size_t>(dst)];
  d.kv_free += r.canvas_len();
  d.load.remove(r.canvas_len());
  if (!d.alive || d.draining) {  // the destination went away meanwhile: place it anew
    const int g = pick_group();
    if (g < 0) {
      pending_.push_back(r);
      return;
    }
    enqueue(g, r);
    return;
  }
  // It joins the queue and is admitted by the group's next decision, as a live group takes a
  // migrated request (actors/tp_group_migration.cpp, join_queue).
  enqueue(dst, r);
}

// -- reconfiguration --------------------------------------------------------------------------

// Forecast from the requests [from, to) at end_s, as the live reconfigurer forecasts
// (policy::forecast_from_arrivals): the `forecast_quantile` of the arrival rate over
// `forecast_subwindow_ms` pieces of the last window_s (bursts, not the mean), the mean rate over
// it, and the length mix of the last 4,096 of them.
policy::forecast engine::rate_forecast(std::size_t from, std::size_t to, double window_s, double end_s) const {
  policy::forecast_config cfg;
  cfg.window_s = window_s;
  cfg.subwindow_s = cl_.forecast_subwindow_s;
  cfg.quantile = cl_.forecast_quantile;
  cfg.block_len = cl_.block_len;
  std::size_t start = to;
  while (start > from && end_s - in_[start - 1].arrival_s < window_s) --start;
  start = std::min(start, to - std::min<std::size_t>(to - from, static_cast<std::size_t>(cfg.max_mix_arrivals)));
  std::vector<policy::arrival_record> arrivals;
  arrivals.reserve(to - start);
  for (std::size_t i = start; i < to; ++i) arrivals.push_back({in_[i].arrival_s, in_[i].prompt_len, in_[i].gen_len});
  return policy::forecast_from_arrivals(arrivals, end_s, cfg);
}

// Boot layout of a reconfiguring policy: a real deployment sizes its first layout from a
// provisioning forecast of its history (`dilaserve provision`), not from arrivals it has not
// seen. The simulator's stand-in for that history is the workload itself, through the same
// policy::provisioning_forecast: its aggregate statistics only, no single arrival time. From
// then on every forecast uses seen arrivals only.
std::vector<policy::partition> engine::boot_layout() {
  if (in_.empty()) return cl_.initial_layout;
  std::vector<policy::arrival_record> history;
  history.reserve(in_.size());
  for (const auto& r : in_) history.push_back({r.arrival_s, r.prompt_len, r.gen_len});
  policy::forecast_config cfg;
  cfg.subwindow_s = cl_.forecast_subwindow_s;
  cfg.quantile = cl_.forecast_quantile;
  cfg.block_len = cl_.block_len;
  const auto fc = policy::provisioning_forecast(history, cfg);
  const auto plan = policy::optimize_layout(cl_.node_devices, {}, fc, cl_.cost, cl_.quality, rcfg_);
  return plan.nodes.size() == cl_.node_devices.size() ? plan.nodes : cl_.initial_layout;
}

void engine::tick_reconfig() {
  // Forecast from arrivals already seen (causal): bursts of the last window, not the mean.
  const double window = std::min(cl_.forecast_window_s, std::max(cl_.forecast_subwindow_s, now_));
  const auto fc = rate_forecast(0, next_arrival_, window, now_);
  if (fc.mix.empty()) return;  // nothing seen yet: no basis for a plan

  std::vector<policy::partition> current;
  for (const auto& n : nodes_) current.push_back(n.target.empty() ? n.layout : n.target);
  // A forecast is evidence for as long as the history it was made from: a regroup is charged
  // against the gain over at most that long, not over the whole dwell.
  auto rc = rcfg_;
  rc.horizon_s = std::min(rc.horizon_s, window);
  policy::reconfig_plan plan;
  const double dt = timed([&] {
    plan = policy::optimize_layout(cl_.node_devices, current, fc, cl_.cost, cl_.quality, rc);
  });
  stats_.reconfig_policy_s += dt;
  stats_.reconfig_max_s = std::max(stats_.reconfig_max_s, dt);
  ++stats_.reconfig_decisions;

  // Drain at most a fraction of the nodes at once, the emptiest first, so capacity never
  // drops by more than that fraction while regrouping.
  std::vector<policy::drain_candidate> candidates(nodes_.size());
  int busy_nodes = 0;
  for (std::size_t n = 0; n < nodes_.size(); ++n) {
    auto& c = candidates[n];
    const bool busy = !nodes_[n].target.empty() || nodes_[n].regrouping;
    busy_nodes += busy ? 1 : 0;
    c.changes = plan.switch_layout && plan.nodes.size() > n && plan.nodes[n] != nodes_[n].layout;
    c.may_change = !busy && now_ - nodes_[n].last_change_s >= cl_.min_dwell_s;  // hysteresis in time
    for (int gid : nodes_[n].groups)
      c.held += groups_[static_cast<std::size_t>(gid)].active.size() + groups_[static_cast<std::size_t>(gid)].queue.size();
  }
  const int limit = policy::nodes_at_once(cl_.max_reconfig_fraction, nodes_.size()) - busy_nodes;
  for (const int n : policy::nodes_to_drain(candidates, limit)) {
    auto& node = nodes_[static_cast<std::size_t>(n)];
    node.target = plan.nodes[static_cast<std::size_t>(n)];
    std::vector<policy::request_view> requeue;
    for (int gid : node.groups) {
      auto& g = groups_[static_cast<std::size_t>(gid)];
      g.draining = true;
      touch(gid);
      requeue.insert(requeue.end(), g.queue.begin(), g.queue.end());
      for (const auto& r : g.queue) g.ledger.leave(r, cl_.quality);
      g.queue.clear();
    }
    for (const auto& r : requeue) {  // not started yet: place them elsewhere
      const int g = pick_group();
      if (g < 0)
        pending_.push_back(r);
      else
        enqueue(g, r);
    }
    maybe_regroup(n);
  }
}

void engine::maybe_regroup(int n) {
  auto& node = nodes_[static_cast<std::size_t>(n)];
  if (node.target.empty() || node.regrouping) return;
  // Drained: nothing in a step, nothing queued, and every request left is waiting at its refresh
  // boundary (groups that decide as live ones) for want of a group to go to.
  auto paused = [&](const sim_group& g) {
    if (!decides_as_live()) return g.active.empty();
    return std::all_of(g.active.begin(), g.active.end(), [](const policy::request_view& r) {
      return r.next_kind == policy::step_kind::refresh;
    });
  };
  for (int gid : node.groups) {
    const auto& g = groups_[static_cast<std::size_t>(gid)];
    if (g.busy || g.reuse_busy || !paused(g) || !g.queue.empty()) return;
  }
  // Those requests go over to the new groups, as a live node spreads them once regrouped.
  for (int gid : node.groups) {
    auto& g = groups_[static_cast<std::size_t>(gid)];
    for (const auto& r : g.active) {
      g.ledger.leave(r, cl_.quality);
      pending_.push_back(r);
    }
    while (!g.active.empty()) remove_active(gid, g.active.size() - 1);
  }
  for (int gid : node.groups) {
    groups_[static_cast<std::size_t>(gid)].alive = false;
    touch(gid);
  }
  node.groups.clear();
  node.regrouping = true;
  ++stats_.reconfigurations;
  push(now_ + cl_.regroup_cost_s, ev::regroup_done, static_cast<std::uint32_t>(n));
}

void engine::on_regroup_done(int n) {
  auto& node = nodes_[static_cast<std::size_t>(n)];
  node.layout = node.target;
  node.target.clear();
  node.regrouping = false;
  node.last_change_s = now_;
  std::vector<int> fresh;
  for (int tp : node.layout) fresh.push_back(make_group(n, tp));
  auto waiting = std::move(pending_);
  pending_.clear();
  for (const auto& r : waiting) enqueue(pick_group(), r);
}

}  // namespace dls::sim::detail
