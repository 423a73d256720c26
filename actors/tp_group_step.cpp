// The step loop of a TP group: each decision (policy::decide_step through the snapshot
// adapter), the step on all k workers at once, and what its outcome changes.
#include "actors/tp_group_state.hpp"

#include "gpu/canvas.hpp"
#include "policies/group_step.hpp"
#include "policies/overload.hpp"
#include "runtime/log.hpp"
#include "runtime/peer_snapshot.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace dls::actors::tp_group_impl {

bool env_names_node_of(const char* var, const std::string& group) {
  const char* n = std::getenv(var);
  return n && *n && node_of_group(group) == n;
}

namespace {

// Weight of one step's residual in the overhead average: about the last 20 steps count, so a
// change of load shows within a second while one slow step moves it little.
constexpr double overhead_weight = 0.05;

// For the recovery tests (docs/runtime.md, "Recovery"): the groups of the node that
// DILASERVE_HOLD_AFTER_SNAPSHOT names stop stepping once they sent a snapshot, as a node that
// hangs right after one, so a test kills it while it surely holds a request mid-run that has a
// snapshot, however fast the machine decodes. The process stays up, so the snapshot reaches its
// keeper.
bool holds_after_snapshot(const std::string& group) { return env_names_node_of("DILASERVE_HOLD_AFTER_SNAPSHOT", group); }

// For the data-plane security test (docs/runtime.md, "Security"): the groups of the node that
// DILASERVE_SNAPSHOT_FAULT names send their keeper a canvas with its first committed answer token
// changed, while they tell the request the digest of the canvas they took, as a frame replaced on
// the way would arrive.
bool forges_snapshots(const std::string& group) { return env_names_node_of("DILASERVE_SNAPSHOT_FAULT", group); }

std::vector<char> forged(const std::vector<char>& bytes) {
  auto c = gpu::canvas::from_bytes(std::string(bytes.begin(), bytes.end()));
  for (std::size_t i = static_cast<std::size_t>(c.prompt_len); i < c.ids.size(); ++i)
    if (c.ids[i] != c.mask_id) {
      c.ids[i] = c.ids[i] == 1 ? 2 : 1;
      break;
    }
  const auto out = c.to_bytes();
  return std::vector<char>(out.begin(), out.end());
}

// A request's recovery snapshot goes to its actor at the head, or with `ucx.snapshots: peer`
// over UCX to the node that keeps this node's snapshots, the actor only learning where it is:
// the canvas then never crosses the head.
void send_snapshot(group_ptr self, const queued_request& q, const std::string& canvas, int32_t steps, int32_t tokens) {
  auto& st = self->state;
  const auto& req = q.meta.request;
  if (!st.holding && holds_after_snapshot(st.setup.name)) {
    st.holding = true;
    rt::log_line(st.setup.name, "holds: takes no more steps (DILASERVE_HOLD_AFTER_SNAPSHOT names this node)");
  }
  if (st.setup.keeper_address.empty() || !st.setup.ucx) {
    self->send(req, rt::snapshot_atom::value, q.meta.epoch, std::vector<char>(canvas.begin(), canvas.end()), steps,
               tokens);
    return;
  }
  rt::peer_snapshot snap{q.meta.request_id, q.meta.epoch, steps, tokens, std::vector<char>(canvas.begin(), canvas.end())};
  // The request checks what the keeper hands back against this digest, which travels over TLS.
  auto digest = rt::peer_snapshot_digest(snap);
  if (forges_snapshots(st.setup.name)) {
    snap.canvas = forged(snap.canvas);
    rt::log_line(st.setup.name, "sends a forged snapshot of request " + std::to_string(q.meta.request_id) +
                                    " (DILASERVE_SNAPSHOT_FAULT names this node)");
  }
  const uint64_t id = take_transfer_ids(st, 1) | rt::ucx_transport::unasked_bit;
  const auto deadline = rt::ucx_transport::clock::now() + std::chrono::milliseconds(st.setup.ucx->config().timeout_ms);
  // The request hears of it only once UCX has sent it: told earlier (its first buffer to the
  // keeper waits for the endpoints' wireup), a request whose node died meanwhile asked the keeper
  // for a snapshot that had not left (CI, once).
  auto me = caf::actor_cast<caf::actor>(self);
  st.setup.ucx->send(st.setup.keeper_address, id, std::make_shared<const std::string>(rt::encode_peer_snapshot(snap)),
                     deadline,
                     [me, req, epoch = q.meta.epoch, keeper = st.setup.keeper_node, steps, tokens,
                      name = st.setup.name, rid = q.meta.request_id, digest = std::move(digest)](const std::string& e) {
                       if (!e.empty()) {
                         rt::log_line(name, "snapshot of request " + std::to_string(rid) + " not kept: " + e);
                         return;
                       }
                       caf::send_as(me, req, rt::snapshot_atom::value, epoch, keeper, steps, tokens, digest);
                     });
  st.snapshots_to_peer += 1;
}

void on_step_done(group_ptr self, const std::vector<uint64_t>& ids, std::vector<step_result>& results,
                  clock_type::time_point t0) {
  auto& st = self->state;
  st.stepping = false;
  double slowest = 0;
  std::string error;
  for (auto& r : results) {
    slowest = std::max(slowest, r.seconds);
    if (!r.error.empty() && error.empty()) error = r.error;
  }
  st.steps += 1;
  st.wall_seconds += std::chrono::duration<double>(clock_type::now() - t0).count();
  (st.refresh_in_flight ? st.refresh_steps : st.reuse_steps)
      .observe(std::chrono::duration<double>(clock_type::now() - t0).count());
  st.engine_seconds += slowest;
  if (st.step_log) {
    st.step_now.wall_s = std::chrono::duration<double>(clock_type::now() - t0).count();
    st.step_now.engine_s = slowest;
    st.step_now.ran_refreshes = 0;
    for (const auto& o : results[0].outcomes)  // a request found finished runs nothing (no rows)
      st.step_now.ran_refreshes += o.report.kind == gpu::step_kind::refresh && o.report.query_rows > 0;
    st.step_log->append(st.step_now);
  }
  if (st.profile) {
    const double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
    st.predicted_seconds += st.predicted_s;
    st.overhead_s += overhead_weight * (std::max(0.0, wall - st.predicted_s) - st.overhead_s);
    st.cost = policy::with_step_overhead(*st.profile, st.view.tp, st.overhead_s);
  }
  if (!error.empty()) {
    rt::log_line(st.setup.name, "step failed: " + error);
    for (auto id : ids) {
      auto it = st.queue.find(id);
      if (it == st.queue.end()) continue;
      self->send(it->second.meta.request, rt::failed_atom::value, it->second.meta.epoch, "engine error: " + error);
      remove(self, id, "failed");
    }
    report_load(self);
    kick(self);
    return;
  }
  bool changed = false;
  for (auto& o : results[0].outcomes) {
    auto it = st.queue.find(o.id);
    if (it == st.queue.end()) continue;
    auto& q = it->second;
    if (o.committed > q.committed)
      q.live.tau_low = st.ledger.commit(view_of(q.live), static_cast<int>(o.committed - q.committed), q.live.tau,
                                        st.setup.policy->quality);
    q.boundary = o.boundary;
    q.steps = o.steps;
    q.committed = o.committed;
    q.live.progress = o.progress;
    if (q.meta.moved_at_us > 0) note_downtime(st, q);
    const auto& req = q.meta.request;
    if (!o.answer.empty() || o.report.finished) {
      auto fresh = q.text.advance(o.answer);
      if (o.report.finished) fresh += q.text.finish();
      if (!fresh.empty()) {
        // Only a streaming client reads the chunks; the others get the whole text at the end.
        rt::block_chunk chunk{q.meta.request_id, 0, q.streamed_blocks++, std::move(fresh)};
        if (q.meta.stream) self->send(req, rt::block_atom::value, q.meta.epoch, chunk);
      }
      if (o.report.finished) {
        st.ledger.finish();
        rt::run_result r{q.text.text(), static_cast<int32_t>(o.steps), static_cast<int32_t>(o.committed),
                         st.setup.node, st.setup.name, (now_s(st) - q.reached_s) * 1e3,
                         progress_now(st, q, now_s(st), st.step_s)};
        self->send(req, rt::finished_atom::value, q.meta.epoch, r);
        remove(self, o.id, "finished");
        changed = true;
        continue;
      }
    }
    if (o.boundary && !o.canvas.empty())
      send_snapshot(self, q, o.canvas, static_cast<int32_t>(o.steps), static_cast<int32_t>(o.committed));
  }
  if (changed) report_load(self);
  kick(self);
}

}  // namespace

void run_step(group_ptr self) {
  auto& st = self->state;
  if (st.stepping) return;
  if (!st.draining) start_migrations(self);
  else hand_back_at_boundaries(self);
  const auto& ctx = *st.setup.policy;
  auto t_policy = clock_type::now();
  double cpu_policy = thread_cpu_s();
  const double now = now_s(st);
  st.view.draining = st.draining;
  const bool control_due = st.dirty || now - st.last_control_s >= ctx.knobs.control_interval_s;
  // The queued requests matter to this decision only if one may be admitted or taus change.
  const auto& active = st.running;
  const auto& queued = st.waiting;
  // A strict request is judged at its first decision, whatever else is due.
  const bool strict_fresh =
      std::any_of(st.fresh.begin(), st.fresh.end(), [&](uint64_t id) {
        auto it = st.queue.find(id);
        return it != st.queue.end() && (st.policy.reject_on_miss || it->second.live.reject_on_miss);
      });
  const bool need_queued = control_due || strict_fresh ||
                           (!st.draining && static_cast<int>(active.size()) < st.policy.max_active);
  std::vector<const live_request*> active_views, queued_views;
  active_views.reserve(active.size());
  for (auto* q : active) active_views.push_back(&q->live);
  if (need_queued) {
    queued_views.reserve(queued.size());
    for (auto* q : queued) queued_views.push_back(&q->live);
  }
  auto snap = snapshot_of(st.view, now, active_views, queued_views);
  snap.control_due = control_due;
  snap.ledger = &st.ledger;
  snap.load = &st.load;
  // A decision that does not look at the queue leaves its new requests new.
  if (need_queued) {
    snap.fresh = std::move(st.fresh);
    st.fresh.clear();
  } else {
    snap.unlisted_queued = queued.size();
  }
  if (st.decisions_log && st.decisions_log->due()) {
    // Written between the clock reads below so that it is not counted as decision time.
    const auto t_log = clock_type::now();
    const double cpu_log = thread_cpu_s();
    decision_record rec{st.setup.name, st.policy.name, st.overhead_s, snap, st.ledger, st.load.arrivals};
    rec.snapshot.ledger = nullptr;
    rec.snapshot.load = nullptr;
    st.decisions_log->append(rec);
    t_policy += clock_type::now() - t_log;
    cpu_policy += thread_cpu_s() - cpu_log;
  }
  const auto d = policy::decide_step(snap, st.policy, st.cost ? &*st.cost : nullptr, ctx.quality);
  // Shedding waited for tau to come down: the requests it did not examine stay new for it (a
  // strict one was judged by its deadline already, once, as promised).
  if (d.shedding_deferred && !st.policy.reject_on_miss)
    for (auto id : snap.fresh)
      if (auto it = st.queue.find(id); it != st.queue.end() && !it->second.live.reject_on_miss) st.fresh.push_back(id);
  for (auto id : d.admitted) {
    auto& q = st.queue[id];
    q.active = true;
    st.waiting.erase(std::find(st.waiting.begin(), st.waiting.end(), &q));
    st.running.push_back(&q);
  }
  if (d.controlled) {
    double lowest = 1.0;
    for (const auto* list : {&snap.active, &snap.queued})
      for (const auto& r : *list)
        if (!r.tau_pinned) lowest = std::min(lowest, r.tau);
    st.lowest_tau = lowest;
    if (lowest < st.policy.thr.tau_max && st.first_lowered_s < 0) st.first_lowered_s = now;
    if (st.policy.refuse_overload && st.cost) st.backlog_s = policy::backlog_s(snap, st.policy, *st.cost, ctx.quality);
  }
  // Refused requests leave before the taus are copied back: snap.queued no longer holds them.
  for (const auto& r : d.refused) {
    auto it = st.queue.find(r.id);
    if (it == st.queue.end()) continue;
    char tau[16];
    std::snprintf(tau, sizeof tau, "%.2f", st.lowest_tau);
    self->send(it->second.meta.request, rt::failed_atom::value, it->second.meta.epoch,
               std::string(rt::overloaded_error) + "group " + st.setup.name + " already at tau " + tau + ": " +
                   r.reason);
    remove(self, r.id, "was refused (overload)");
    ++st.refused;
    if (st.first_refused_s < 0) st.first_refused_s = now;
  }
  for (const auto& r : d.rejected) {
    auto it = st.queue.find(r.id);
    if (it == st.queue.end()) continue;
    self->send(it->second.meta.request, rt::failed_atom::value, it->second.meta.epoch,
               std::string(rt::deadline_refused_error) + "group " + st.setup.name + ": " + r.reason);
    remove(self, r.id, "was refused (strict SLO)");
    ++st.rejected_on_miss;
  }
  if (!d.refused.empty() || !d.rejected.empty()) report_load(self);
  if (d.controlled) {
    // snap.active is the active list followed by the admitted ones; snap.queued the rest, in order.
    // st.running now lists them in that order too.
    for (std::size_t i = 0; i < snap.active.size(); ++i) st.running[i]->live.tau = snap.active[i].tau;
    for (std::size_t i = 0; i < snap.queued.size(); ++i) st.waiting[i]->live.tau = snap.queued[i].tau;
    st.dirty = false;
    st.last_control_s = now;
  }
  st.view.tau_cap = d.tau_cap;
  st.step_s = d.step_s;
  // Refusals change the load the taus were chosen for: the next decision controls again.
  if (!d.admitted.empty() || !d.refused.empty() || !d.rejected.empty()) st.dirty = true;
  st.policy_seconds += std::chrono::duration<double>(clock_type::now() - t_policy).count();
  st.policy_cpu_seconds += thread_cpu_s() - cpu_policy;
  st.decisions += 1;
  // The request actors learn their new taus and kinds once the step is out: the reports are
  // bookkeeping (status, the directory), and the workers need not wait for them. Taus move only
  // when the controller ran; otherwise only the stepped requests' kinds did.
  auto report = [&] {
    const auto t_report = clock_type::now();
    const double cpu_report = thread_cpu_s();
    if (d.controlled) {
      tell_progress(self, now, d.step_s, st.running);
      tell_progress(self, now, d.step_s, st.waiting);
    } else {
      std::vector<queued_request*> stepped;
      for (auto id : d.batch) stepped.push_back(&st.queue[id]);
      tell_progress(self, now, d.step_s, stepped);
    }
    st.report_seconds += std::chrono::duration<double>(clock_type::now() - t_report).count();
    st.report_cpu_seconds += thread_cpu_s() - cpu_report;
  };
  const auto& ids = d.batch;
  if (ids.empty()) {
    report();
    if (st.draining) finish_drain(self);
    return;
  }
  step_order order{ids};
  order.tau.reserve(ids.size());
  policy::batch_totals totals;
  st.refresh_in_flight = false;
  for (auto id : ids) {
    const auto& lr = st.queue[id].live;
    st.refresh_in_flight = st.refresh_in_flight || lr.progress.next_refresh;
    order.tau.push_back(lr.tau);
    totals.add(policy::next_step_item(view_of(lr)));
  }
  st.predicted_s = st.profile ? st.profile->step_seconds(st.view.tp, totals) : 0.0;
  if (st.step_log) {
    auto& r = st.step_now;
    r.start_s = static_cast<double>(unix_now_us()) / 1e6;
    r.predicted_s = st.predicted_s;
    r.batch = static_cast<int>(ids.size());
    r.refreshes = static_cast<int>(totals.refresh_items);
    r.query_rows = totals.query_rows;
    r.key_rows = totals.key_rows;
    r.active = static_cast<int>(st.running.size());
    r.waiting = static_cast<int>(st.waiting.size());
  }
  st.stepping = true;
  auto k = st.setup.workers.size();
  auto results = std::make_shared<std::vector<step_result>>(k);
  auto left = std::make_shared<std::size_t>(k);
  auto t0 = clock_type::now();
  if (st.idle_since) st.idle_with_work_seconds += std::chrono::duration<double>(t0 - *st.idle_since).count();
  st.idle_since.reset();
  for (auto id : ids)
    if (auto& q = st.queue[id]; q.meta.moved_at_us > 0 && q.resumed_ms < 0)
      q.resumed_ms = static_cast<double>(unix_now_us() - q.meta.moved_at_us) / 1e3;
  for (std::size_t r = 0; r < k; ++r) {
    // Generous: a step of a large model takes seconds. A worker that never answers
    // fails its batch explicitly instead of stalling the group forever.
    self->request(st.setup.workers[r], step_timeout, step_atom::value, order)
        .then(
            [=](step_result& res) {
              (*results)[r] = std::move(res);
              if (--*left == 0) on_step_done(self, ids, *results, t0);
            },
            [=](caf::error& e) {
              (*results)[r].error = "worker " + std::to_string(r) + " lost: " + to_string(e);
              if (--*left == 0) on_step_done(self, ids, *results, t0);
            });
  }
  report();
}

// Steps are triggered by a message to self, so admissions and drains queued in the
// mailbox are handled between any two steps.
void kick(group_ptr self) {
  auto& st = self->state;
  if (st.holding) return;
  if (st.queue.empty()) st.idle_since.reset();
  else if (!st.stepping && !st.idle_since) st.idle_since = clock_type::now();
  if (!self->state.stepping && !self->state.queue.empty()) self->send(self, step_atom::value);
  else if (self->state.draining && self->state.queue.empty() && !self->state.stepping) finish_drain(self);
}

// Empty steps time the messaging round trip to every worker alone: the per-step overhead the
// SLO counts (the least of `rounds`, so one slow wake-up at start does not set it), and the
// first estimate of the moving overhead, which real steps then refine.
void time_empty_steps(group_ptr self, int rounds) {
  const auto t0 = clock_type::now();
  auto left = std::make_shared<std::size_t>(self->state.setup.workers.size());
  auto done = [=] {
    if (--*left > 0) return;
    auto& st = self->state;
    const double took = std::chrono::duration<double>(clock_type::now() - t0).count();
    st.idle_round_trip_s = rounds == slo_overhead_rounds ? took : std::min(st.idle_round_trip_s, took);
    if (st.steps == 0) {
      st.overhead_s = st.idle_round_trip_s;
      st.cost = policy::with_step_overhead(*st.profile, st.view.tp, st.overhead_s);
    }
    if (!st.slo_overhead_fixed) st.slo_overhead_s = st.idle_round_trip_s;
    if (rounds > 1) {
      time_empty_steps(self, rounds - 1);
    } else if (!st.slo_overhead_fixed) {
      const auto world = static_cast<int>(st.setup.workers.size());
      st.slo_overhead_s = st.setup.slo_book ? st.setup.slo_book->offer(world, st.idle_round_trip_s)
                                            : st.idle_round_trip_s;
      st.slo_overhead_fixed = true;
    }
  };
  for (auto& w : self->state.setup.workers)
    self->request(w, step_timeout, step_atom::value, step_order{}).then([=](step_result&) { done(); },
                                                                          [=](caf::error&) { done(); });
}

}  // namespace dls::actors::tp_group_impl
