#include "sim/simulator.hpp"

#include "policies/group_step.hpp"
#include "policies/placement.hpp"
#include "policies/predict.hpp"
#include "sim/engine.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

namespace dls::sim {

namespace detail {

engine::engine(const sim_cluster& c, const std::vector<sim_request>& in, const run_config& cfg)
    : cl_(c), in_(in), cfg_(cfg), cost_(c.cost), overhead_est_s_(c.control_plane.step_s) {
  const auto& p = cfg_.policy;
  sched_.order = p.order;
  sched_.demote_late = p.demote_late;
  sched_.token_budget = c.token_budget;
  sched_.max_batch = c.max_batch;
  sched_.refresh_split = p.split_refresh ? c.refresh_split : 0;
  sched_.refresh_split_growth = c.refresh_split_growth;
  sched_.refresh_join_growth = c.refresh_join_growth;
  sched_.missed_renewal = c.missed_renewal;
  sched_.admission_control = c.admission_control;
  sched_.slack_budget = c.slack_budget;
  sched_.oldest_missed_first = c.oldest_missed_first;
  sched_.missed_grace = c.missed_grace;
  thr_ = c.threshold;
  thr_.per_request = p.tau_per_request;
  thr_.load_cap = p.tau_load_cap;
  if (p.tau_per_request || p.tau_load_cap) {  // only tau control spends the accuracy budget
    ledger_.budget = thr_.accuracy_budget;
    ledger_.tau_ref = thr_.tau_max;
  }
  rcfg_ = c.reconfig;
  // The switching test charges what the simulator does to a regrouped node.
  rcfg_.regroup_s = c.regroup_cost_s;
  rcfg_.horizon_s = c.min_dwell_s;
  rcfg_.nodes_at_once = policy::nodes_at_once(c.max_reconfig_fraction, c.node_devices.size());
  rcfg_.slo_scale = cfg.slo_scale;
  rcfg_.request_overhead_s = c.slo_request_overhead_s;
  mcfg_ = c.migration;
  mcfg_.mode = p.migration;
  co_run_ = p.co_run && c.co_run.model != policy::co_run_model::off;
  live_policy_.name = p.name;
  live_policy_.sched = sched_;
  live_policy_.thr = thr_;
  live_policy_.max_active = c.max_active;

  rt_.resize(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const auto& r = in[i];
    if (i > 0 && r.arrival_s < in[i - 1].arrival_s)
      throw std::invalid_argument("simulate: requests must be sorted by arrival");
    rt_[i].deadline_s = request_deadline_s(c, r, cfg.slo_scale);
    rt_[i].answer_blocks = r.answer_blocks;
    std::uint64_t s = cfg.seed * 0x9e3779b97f4a7c15ULL + i;
    rt_[i].draw = rng(splitmix64(s));
  }
  nodes_.resize(c.node_devices.size());
  // Policies that reconfigure choose their boot layout from the forecast (sim_control.cpp);
  // the others keep the cluster file's layout.
  const auto layout = p.reconfigure && c.boot_from_forecast ? boot_layout() : c.initial_layout;
  stats_.boot_layout = layout;
  for (std::size_t n = 0; n < c.node_devices.size(); ++n) {
    nodes_[n].layout = layout[n];
    for (int tp : layout[n]) make_group(static_cast<int>(n), tp);
  }
}

int engine::make_group(int node, int tp) {
  sim_group g;
  g.id = static_cast<int>(groups_.size());
  g.node = node;
  g.tp = tp;
  g.kv_free = cl_.cost.kv_capacity_tokens(tp);
  g.tau_cap = thr_.tau_max;
  g.arrivals.cfg.window_s = cl_.cap_forecast_s;
  g.arrivals.refresh_s = cl_.cap_forecast_refresh_s;
  g.ledger.budget = ledger_.budget;
  g.ledger.tau_ref = ledger_.tau_ref;
  groups_.push_back(std::move(g));
  nodes_[static_cast<std::size_t>(node)].groups.push_back(groups_.back().id);
  touch(groups_.back().id);
  return groups_.back().id;
}

void engine::push(double t, ev type, std::uint32_t a, std::uint32_t b) {
  events_.push({t, seq_++, type, a, b});
}

void engine::touch(int gi) {
  auto& g = groups_[static_cast<std::size_t>(gi)];
  if (g.placed_key.second >= 0) placement_.erase(g.placed_key);
  g.placed_key = {0, -1};
  if (!g.alive || g.draining) return;
  // Kept ordered by policy::placement_load, so that pick_group is place_request's argmin
  // (ties: the lowest id) without a pass over every group per arrival.
  g.placed_key = {policy::placement_load({g.tp, static_cast<int>(g.active.size() + g.queue.size()), false}), g.id};
  placement_.insert(g.placed_key);
}

int engine::pick_group() { return placement_.empty() ? -1 : placement_.begin()->second; }

bool engine::idle() const { return in_system_ == 0 && next_arrival_ >= in_.size(); }

void engine::on_arrival(std::uint32_t id) {
  const auto& in = in_[id];
  policy::request_view r;
  r.id = id;
  r.arrival_s = in.arrival_s;
  r.deadline_s = rt_[id].deadline_s;
  r.tau = cl_.ref_tau;
  r.prompt_len = in.prompt_len;
  r.gen_len = in.gen_len;
  r.block_len = cl_.block_len;
  ++in_system_;
  const int g = pick_group();
  // Strict SLO: a group that decides as a live one judges it at its first decision
  // (decide_as_live); the simulator-only step paths judge it here, at placement.
  r.reject_on_miss = in.reject_on_miss || cl_.reject_on_miss;
  if (r.reject_on_miss && g >= 0 && !decides_as_live()) {
    // Strict SLO: refuse now, with a reason, what the group it would join cannot finish in time.
    const auto& grp = groups_[static_cast<std::size_t>(g)];
    const double tau_min = thr_.per_request || thr_.load_cap ? thr_.tau_min : cl_.ref_tau;
    std::string why;
    stats_.batch_policy_s += timed([&] {
      why = policy::refuse_if_late(r, grp.active, grp.queue, now_, sched_, cl_.quality, cost_, grp.tp, tau_min);
    });
    if (!why.empty()) {
      rt_[id].rejected = true;
      ++stats_.rejected;
      if (stats_.first_rejection.empty()) stats_.first_rejection = why;
      --in_system_;
      return;
    }
  }
  if (g < 0) {
    pending_.push_back(r);
    return;
  }
  enqueue(g, r);
}

// The path from the client to a group: wait for the first free server, which spends cpu_s on
// the request, then request_s of latency. In flight there the request counts as in the
// system, so the policy ticks keep running.
void engine::enter_control_plane(std::uint32_t id) {
  const auto& cp = cl_.control_plane;
  if (cp_free_.empty()) cp_free_.assign(static_cast<std::size_t>(cp.cores), 0.0);
  auto server = std::min_element(cp_free_.begin(), cp_free_.end());
  const double start = std::max(now_, *server);
  *server = start + cp.cpu_s;
  ++in_system_;
  push(*server + cp.request_s, ev::reach_group, id);
}

// The group's reference batch for marginal costs, as a live group builds it (decide_step): a
// token-budget-full batch of its current requests' mean canvas (not the whole run's, which the
// simulator used to read ahead of time).
policy::batch_totals engine::group_reference(const sim_group& g) const {
  double sum = g.load.sum_canvas, n = g.load.requests;
  for (const auto& r : g.queue) {
    sum += r.canvas_len();
    n += 1;
  }
  return policy::group_reference_batch(sum, n, cl_.block_len, cl_.token_budget, spb(cl_.ref_tau));
}

double engine::predicted_utilization(sim_group& g) {
  if (sched_.order != policy::queue_order::least_slack || !sched_.slack_budget) return 0.0;  // no deferrals to weigh
  const auto& demand = g.arrivals.update(now_, cost_, g.tp, group_reference(g), cl_.block_len, cl_.quality, thr_);
  return policy::predicted_utilization(demand, g.tau_cap);
}

double engine::contention_factor(sim_group& g) {
  const auto& k = cl_.control_plane.contention;
  if (!k.enabled()) return 1.0;
  const double since = now_ - k.window_s;
  while (!g.ran.empty() && g.ran.front().second <= since) g.ran.pop_front();
  double busy = 0;
  for (const auto& [a, b] : g.ran) busy += std::min(b, now_) - std::max(a, since);
  return k.factor(busy / k.window_s);
}

void engine::enqueue(int gi, const policy::request_view& r) {
  auto& g = groups_[static_cast<std::size_t>(gi)];
  g.actor_s += cl_.control_plane.group_s;
  g.queue.push_back(r);
  g.queue.back().group = gi;
  // A strict request's first placement (not a move, a re-placement or a regroup's carry-over)
  // is judged at the group's next decision, as a live group judges it.
  if (r.reject_on_miss && !rt_[r.id].judged && rt_[r.id].migrations == 0 && rt_[r.id].admit_s < 0)
    g.fresh.push_back(r.id);
  g.ledger.enter(g.queue.back(), cl_.quality);
  g.arrivals.record({now_, r.prompt_len, r.gen_len, r.deadline_s - r.arrival_s});
  g.dirty = true;
  touch(gi);
  start_step(gi);
}


int engine::plan_steps(req_rt& rt, int masks, double tau) {
  // A whole block with measured step counts at this tau draws from them: their spread, not
  // only their mean, decides how many of its steps refresh_interval makes refreshes.
  if (const auto d = masks == cl_.block_len ? cl_.quality.measured_block_steps(masks, tau) : std::vector<double>{};
      !d.empty()) {
    double u = rt.draw.uniform();
    std::size_t k = 0;
    while (k + 1 < d.size() && u >= d[k]) u -= d[k++];
    return std::clamp(static_cast<int>(k) + 1, 1, masks);
  }
  // Stochastic rounding of masks / m(tau): the expected step count matches the published
  // NFE at this tau, and each block draws its own integer count.
  const double x = cl_.quality.steps_for(masks, tau);
  const double fl = std::floor(x);
  int n = static_cast<int>(fl) + (rt.draw.uniform() < x - fl ? 1 : 0);
  return std::clamp(n, 1, std::max(1, masks));
}

void engine::start_step(int gi) {
  auto& g = groups_[static_cast<std::size_t>(gi)];
  if (!g.alive || (g.busy && (!co_run_ || g.reuse_busy))) return;
  // The group's actor first handles the messages of the requests that reached it
  // (control_plane.group_ms); a running step (co-running) is not held back by it.
  if (g.actor_busy) return;
  if (g.actor_s > 0 && !g.busy) {
    g.actor_busy = true;
    push(now_ + g.actor_s, ev::group_ready, static_cast<std::uint32_t>(gi));
    g.actor_s = 0;
    return;
  }
  if (cl_.drop_wait_factor > 0 && !g.queue.empty()) {
    auto& q = g.queue;
    auto end = std::remove_if(q.begin(), q.end(), [&](const policy::request_view& r) {
      const double limit = r.arrival_s + cl_.drop_wait_factor * (r.deadline_s - r.arrival_s);
      if (now_ <= limit) return false;
      rt_[r.id].dropped = true;
      g.ledger.leave(r, cl_.quality);
      --in_system_;
      return true;
    });
    if (end != q.end()) {
      q.erase(end, q.end());
      touch(gi);
    }
  }
  // Whole refreshes in one step stream: the group decides as a live group does, in one call.
  if (decides_as_live()) {
    decide_as_live(gi);
    if (g.batch.empty()) {  // nothing active, or (draining) all of it waiting at its boundary
      if (g.draining) maybe_regroup(g.node);
      return;
    }
    run_batch(gi);
    return;
  }
  if (!g.queue.empty()) {
    policy::admission_room room;
    room.slots = cl_.max_active - static_cast<int>(g.active.size());
    room.kv_tokens = g.kv_free;
    std::vector<int> picked;
    stats_.batch_policy_s += timed([&] {
      picked = policy::admit_to_group(g.queue, room, now_, sched_, cl_.quality, g.step_s, &cost_, g.tp, g.active);
    });
    if (!picked.empty()) {
      std::vector<bool> taken(g.queue.size(), false);
      for (int i : picked) {
        auto r = g.queue[static_cast<std::size_t>(i)];
        taken[static_cast<std::size_t>(i)] = true;
        g.load.add(r.canvas_len());
        g.kv_free -= r.canvas_len();
        if (rt_[r.id].admit_s < 0) rt_[r.id].admit_s = now_;
        g.active.push_back(r);
      }
      std::size_t w = 0;
      for (std::size_t i = 0; i < g.queue.size(); ++i)
        if (!taken[i]) g.queue[w++] = g.queue[i];
      g.queue.resize(w);
      g.dirty = true;
    }
  }
  if (g.active.empty()) {
    if (g.draining) maybe_regroup(g.node);
    return;
  }
  g.step_s = policy::held_step_s(cost_, g.tp, g.load, cl_.block_len, spb(g.tau_cap), cl_.token_budget,
                                 cl_.max_batch);
  if ((thr_.per_request || thr_.load_cap) &&
      (g.dirty || now_ - g.last_control >= cl_.control_interval_s))
    control(gi);
  if (co_run_) {
    start_streams(gi);
    return;
  }
  stats_.batch_policy_s += timed([&] {
    policy::form_batch(g.active, now_, sched_, cl_.quality, g.step_s, g.batch, &cost_, g.tp, &g.shares,
                       g.queue.size(), predicted_utilization(g));
  });
  ++stats_.batch_decisions;
  run_batch(gi);
}

void engine::run_batch(int gi) {
  auto& g = groups_[static_cast<std::size_t>(gi)];
  policy::batch_totals t;
  for (std::size_t j = 0; j < g.batch.size(); ++j)
    t.add(policy::step_item_for(g.active[static_cast<std::size_t>(g.batch[j])], g.shares[j]));
  // The engine part of a step (all but the control plane's step_s) at the speed measured for
  // the group's recent utilization on a machine shared with the control plane
  // (control_plane.contention; 1 without it).
  const double slow = contention_factor(g);
  const double over = cl_.control_plane.step_s;
  auto stretched = [&](double s) { return slow == 1.0 ? s : over + (s - over) * slow; };
  const double dur = stretched(cl_.cost.step_seconds(g.tp, t));
  g.excess_s = dur - (cl_.cost.step_seconds(g.tp, t) - over);  // beyond the profile's time
  for (std::size_t j = 0; j < g.batch.size(); ++j) {  // where the latency goes (--stats)
    const auto& r = g.active[static_cast<std::size_t>(g.batch[j])];
    policy::batch_totals own;
    own.add(policy::step_item_for(r, g.shares[j]));
    auto& rt = rt_[r.id];
    rt.in_steps_s += dur;
    rt.alone_s += stretched(cl_.cost.step_seconds(g.tp, own));
  }
  g.busy = true;
  if (cfg_.on_step) {
    dls::step_record rec;
    rec.start_s = now_;
    rec.wall_s = dur;
    rec.engine_s = rec.predicted_s = cl_.cost.step_seconds(g.tp, t) - over;  // the profile's, as live
    rec.batch = static_cast<int>(g.batch.size());
    rec.refreshes = rec.ran_refreshes = static_cast<int>(t.refresh_items);
    rec.query_rows = t.query_rows;
    rec.key_rows = t.key_rows;
    rec.active = static_cast<int>(g.active.size());
    rec.waiting = static_cast<int>(g.queue.size());
    cfg_.on_step(rec);
  }
  if (cl_.control_plane.contention.enabled()) g.ran.emplace_back(now_, now_ + dur);
  ++stats_.group_steps;
  stats_.group_busy_s += dur;
  stats_.request_steps += g.batch.size();
  push(now_ + dur, ev::step_done, static_cast<std::uint32_t>(gi));
}

void engine::commit(policy::request_view& r) {
  auto& rt = rt_[r.id];
  if (r.steps_in_block == 0) {
    r.masks_left_in_block = r.block_len;
    rt.steps_left = plan_steps(rt, r.block_len, r.tau);
  }
  const int s = std::max(1, rt.steps_left);
  const int c = (r.masks_left_in_block + s - 1) / s;  // finishes the block in exactly s steps
  r.masks_left_in_block -= c;
  rt.steps_left = s - 1;
  r.steps_in_block += 1;
  // As the engine's canvas: a step whose index in the block refresh_interval divides refreshes.
  const int every = cl_.quality.refresh_interval();
  r.next_kind = every > 0 && r.steps_in_block % every == 0 ? policy::step_kind::refresh : policy::step_kind::reuse;
  rt.tokens += c;
  r.tau_low = rt.tau_low = groups_[static_cast<std::size_t>(r.group)].ledger.commit(r, c, r.tau, cl_.quality);
  rt.steps += 1;
  if (r.masks_left_in_block <= 0) {
    r.blocks_done += 1;
    r.steps_in_block = 0;
    r.masks_left_in_block = 0;
    r.next_kind = policy::step_kind::refresh;
  }
}

void engine::finish_request(const policy::request_view& r) {
  rt_[r.id].finish_s = now_;
  groups_[static_cast<std::size_t>(r.group)].ledger.finish();
  --in_system_;
}

void engine::remove_active(int gi, std::size_t idx) {
  auto& g = groups_[static_cast<std::size_t>(gi)];
  const auto& r = g.active[idx];
  g.load.remove(r.canvas_len());
  g.kv_free += r.canvas_len();
  g.active[idx] = g.active.back();
  g.active.pop_back();
  g.dirty = true;
}

void engine::on_step_done(int gi) {
  auto& g = groups_[static_cast<std::size_t>(gi)];
  g.busy = false;
  if (cl_.control_plane.contention.enabled()) {
    // The live group's moving estimate of a step's excess over the profile, which its
    // deadlines and decisions count (actors/tp_group_step.cpp, overhead_s).
    overhead_est_s_ += live_overhead_weight * (std::max(0.0, g.excess_s) - overhead_est_s_);
    for (int tp : cl_.cost.tp_degrees())
      cost_ = policy::with_step_overhead(tp == cl_.cost.tp_degrees().front() ? cl_.cost : cost_, tp,
                                         overhead_est_s_ - cl_.control_plane.step_s);
  }
  for (std::size_t j = 0; j < g.batch.size(); ++j) {
    auto& r = g.active[static_cast<std::size_t>(g.batch[j])];
    if (policy::completes_step(r, g.shares[j])) {
      r.refresh_done = 0;
      commit(r);
    } else {
      r.refresh_done += g.shares[j];  // a layer range of a split refresh: no tokens yet
      ++stats_.refresh_chunks;
    }
  }
  settle(gi);
}

void engine::settle(int gi) {
  auto& g = groups_[static_cast<std::size_t>(gi)];
  // Remove the finished and departing requests that no running step holds (co-running: the
  // other stream's step may still hold some); descending indices keep swap-removal valid.
  bool changed = false;
  for (std::size_t i = g.active.size(); i-- > 0;) {
    const auto& r = g.active[i];
    if (rt_[r.id].stream != 0) continue;
    if (r.finished() || (rt_[r.id].answer_blocks > 0 && r.blocks_done >= rt_[r.id].answer_blocks)) {
      finish_request(r);
      remove_active(gi, i);
      changed = true;
    } else if (rt_[r.id].leaving) {
      depart(gi, i);
      changed = true;
    }
  }
  if (changed) touch(gi);
  start_step(gi);
}

// Co-running: the refresh stream runs steps of refreshes only and the reuse stream steps of
// reuse requests only, each batch formed by the same scheduler over its own candidates. A
// reuse step that starts while no refresh runs holds the whole device (a refresh arriving
// meanwhile waits for it, a few ms); one that starts beside a refresh shares the device as the
// co_run model says, and the refresh step's remaining time is re-rated while it does.
void engine::start_streams(int gi) {
  auto& g = groups_[static_cast<std::size_t>(gi)];
  if (!g.busy && !(g.reuse_busy && g.reuse_whole) &&
      start_stream_step(gi, policy::step_kind::refresh, g.refresh_ids, g.refresh_totals)) {
    g.busy = true;
    g.refresh_left_s = cl_.cost.step_seconds(g.tp, g.refresh_totals);
    g.refresh_start = now_;
    g.refresh_since = now_;
    g.refresh_rate = g.reuse_busy ? policy::co_run_refresh_rate(cl_.cost, g.tp, g.refresh_totals, g.reuse_cost, cl_.co_run)
                                  : 1.0;
    push(now_ + g.refresh_left_s / g.refresh_rate, ev::step_done, static_cast<std::uint32_t>(gi), ++g.version);
  }
  policy::batch_totals t;
  if (!g.reuse_busy && start_stream_step(gi, policy::step_kind::reuse, g.reuse_ids, t)) {
    g.reuse_busy = true;
    g.reuse_whole = !g.busy;
    g.reuse_start = now_;
    if (g.busy) {
      g.reuse_cost = policy::co_run(cl_.cost, g.tp, t, g.refresh_totals, cl_.co_run);
      retime_refresh(gi);
    } else {
      g.reuse_cost = {cl_.cost.step_seconds(g.tp, t), 1.0, 1.0};
    }
    push(now_ + g.reuse_cost.reuse_s, ev::reuse_done, static_cast<std::uint32_t>(gi));
  }
}

bool engine::start_stream_step(int gi, policy::step_kind kind, std::vector<std::uint64_t>& ids,
                               policy::batch_totals& t) {
  auto& g = groups_[static_cast<std::size_t>(gi)];
  auto& cand = candidates_;
  cand.clear();
  for (const auto& r : g.active) {
    const auto& rt = rt_[r.id];
    if (rt.stream == 0 && !rt.leaving && r.next_kind == kind) cand.push_back(r);
  }
  if (cand.empty()) return false;
  stats_.batch_policy_s += timed([&] {
    policy::form_batch(cand, now_, sched_, cl_.quality, g.step_s, g.batch, &cost_, g.tp, &g.shares, g.queue.size(),
                       predicted_utilization(g));
  });
  ++stats_.batch_decisions;
  ids.clear();
  t = policy::batch_totals{};
  for (int j : g.batch) {
    const auto& r = cand[static_cast<std::size_t>(j)];
    const auto item = policy::step_item_for(r, 1.0);
    t.add(item);
    policy::batch_totals own;
    own.add(item);
    rt_[r.id].alone_s += cl_.cost.step_seconds(g.tp, own);
    rt_[r.id].stream = kind == policy::step_kind::refresh ? 1 : 2;
    ids.push_back(r.id);
  }
  ++stats_.group_steps;
  stats_.request_steps += ids.size();
  return true;
}

void engine::retime_refresh(int gi) {
  auto& g = groups_[static_cast<std::size_t>(gi)];
  g.refresh_left_s = std::max(0.0, g.refresh_left_s - (now_ - g.refresh_since) * g.refresh_rate);
  g.refresh_since = now_;
  g.refresh_rate = g.reuse_busy && !g.reuse_whole
                       ? policy::co_run_refresh_rate(cl_.cost, g.tp, g.refresh_totals, g.reuse_cost, cl_.co_run)
                       : 1.0;
  // A rate of 0 stalls the step until the reuse step ends and re-times it again.
  const double at = g.refresh_rate > 0 ? now_ + g.refresh_left_s / g.refresh_rate : std::numeric_limits<double>::infinity();
  ++g.version;
  if (at < std::numeric_limits<double>::infinity()) push(at, ev::step_done, static_cast<std::uint32_t>(gi), g.version);
}

void engine::on_stream_done(int gi, bool refresh, std::uint32_t version) {
  auto& g = groups_[static_cast<std::size_t>(gi)];
  if (refresh && version != g.version) return;  // re-timed since: a later event stands
  std::vector<std::uint64_t> ids;
  double dur = 0;
  if (refresh) {
    ids.swap(g.refresh_ids);
    dur = now_ - g.refresh_start;
    g.busy = false;
  } else {
    ids.swap(g.reuse_ids);
    dur = now_ - g.reuse_start;
    g.reuse_busy = false;
    g.reuse_whole = false;
    if (g.busy) retime_refresh(gi);
  }
  for (auto id : ids)
    for (auto& r : g.active)
      if (r.id == id) {
        rt_[id].stream = 0;
        rt_[id].in_steps_s += dur;
        commit(r);
        break;
      }
  settle(gi);
}

run_result engine::run() {
  const auto wall0 = clock::now();
  if (mcfg_.mode != policy::migration_mode::none && groups_.size() > 1)
    push(cl_.migration_interval_s, ev::tick_migration);
  // The boot layout came from the provisioning forecast; the first re-plan comes one interval
  // in, over the history seen by then.
  if (cfg_.policy.reconfigure) push(cl_.reconfig_interval_s, ev::tick_reconfig);
  const std::size_t n = in_.size();
  const std::size_t report_every = std::max<std::size_t>(1, n / 200);
  for (;;) {
    const bool have_arrival = next_arrival_ < n;
    if (!have_arrival && events_.empty()) break;
    if (have_arrival && (events_.empty() || in_[next_arrival_].arrival_s <= events_.top().t)) {
      now_ = in_[next_arrival_].arrival_s;
      const auto id = static_cast<std::uint32_t>(next_arrival_++);
      if (cl_.control_plane.modelled())
        enter_control_plane(id);
      else
        on_arrival(id);
      ++stats_.events;
      if (cfg_.progress && next_arrival_ % report_every == 0)
        cfg_.progress(static_cast<double>(next_arrival_) / static_cast<double>(n));
      continue;
    }
    const event e = events_.top();
    events_.pop();
    now_ = e.t;
    ++stats_.events;
    switch (e.type) {
      case ev::step_done:
        if (co_run_)
          on_stream_done(static_cast<int>(e.a), true, e.b);
        else
          on_step_done(static_cast<int>(e.a));
        break;
      case ev::reuse_done: on_stream_done(static_cast<int>(e.a), false, 0); break;
      case ev::migrate_arrive: on_migrate_arrive(e.a, static_cast<int>(e.b)); break;
      case ev::tick_migration:
        if (idle()) break;
        tick_migration();
        push(now_ + cl_.migration_interval_s, ev::tick_migration);
        break;
      case ev::tick_reconfig:
        if (idle()) break;
        tick_reconfig();
        push(now_ + cl_.reconfig_interval_s, ev::tick_reconfig);
        break;
      case ev::regroup_done: on_regroup_done(static_cast<int>(e.a)); break;
      case ev::group_ready:
        groups_[e.a].actor_busy = false;
        start_step(static_cast<int>(e.a));
        break;
      case ev::reach_group:
        --in_system_;
        on_arrival(e.a);
        break;
    }
  }
  run_result res;
  res.requests.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto& o = res.requests[i];
    const auto& rt = rt_[i];
    o.arrival_s = in_[i].arrival_s;
    o.deadline_s = rt.deadline_s;
    o.finish_s = rt.finish_s;
    o.dropped = rt.dropped;
    o.rejected = rt.rejected;
    o.tokens = rt.tokens;
    o.steps = rt.steps;
    o.migrations = rt.migrations;
    o.queued_s = rt.admit_s >= 0 ? rt.admit_s - o.arrival_s : 0.0;
    o.in_steps_s = rt.in_steps_s;
    o.alone_s = rt.alone_s;
    // Scored as the ledger charges (threshold.hpp): a decode at its lowest tau throughout.
    o.accuracy = rt.tokens > 0 ? cl_.quality.accuracy(rt.tau_low) : 0.0;
  }
  stats_.virtual_end_s = now_;
  stats_.wall_s = std::chrono::duration<double>(clock::now() - wall0).count();
  res.stats = stats_;
  if (cfg_.progress) cfg_.progress(1.0);
  return res;
}

}  // namespace detail

run_result simulate(const sim_cluster& cluster, const std::vector<sim_request>& requests,
                    const run_config& cfg) {
  detail::engine e(cluster, requests, cfg);
  return e.run();
}

double request_deadline_s(const sim_cluster& c, const sim_request& r, double slo_scale) {
  return policy::slo_deadline_s(r.arrival_s, slo_scale, c.deadline_cost(), c.quality, r.prompt_len, r.gen_len, c.block_len,
                                c.ref_tau, c.slo_request_overhead_s);
}

double cluster_capacity_rps(const sim_cluster& c, const std::vector<policy::length_class>& mix) {
  const policy::reconfig_config& rc = c.reconfig;
  std::map<int, double> per_tp;
  double total = 0;
  for (const auto& node : c.initial_layout)
    for (int tp : node) {
      if (!per_tp.count(tp))
        per_tp[tp] = policy::evaluate_group(c.cost, c.quality, mix, tp, c.ref_tau, rc).max_rps;
      total += per_tp[tp];
    }
  return total;
}

}  // namespace dls::sim
