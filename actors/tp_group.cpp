// A TP group runs the step loop over its queue. Before each step it asks the policies
// (policy::decide_step, through the snapshot adapter of policy_view.hpp) which queued
// requests to admit, every request's tau and which requests step now; the step goes with
// those taus to all k workers at once. They compute their shards in lockstep through the
// shared-memory all-reduce and end with identical canvases, so rank 0's outcome is the
// group's. The group then streams finished blocks, snapshots canvases at refresh
// boundaries, and answers.
#include "actors/answer_text.hpp"
#include "actors/decision_record.hpp"
#include "actors/local_messages.hpp"
#include "actors/node_parts.hpp"
#include "actors/peer_roles.hpp"
#include "common/step_log.hpp"
#include "gpu/canvas.hpp"
#include "gpu/kv_reshard.hpp"
#include "gpu/kv_wire.hpp"
#include "policies/group_step.hpp"
#include "policies/migration.hpp"
#include "policies/overload.hpp"
#include "policies/presets.hpp"
#include "runtime/group_load.hpp"
#include "runtime/log.hpp"
#include "runtime/peer_snapshot.hpp"
#include "runtime/step_histogram.hpp"

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include <time.h>

#include <cstdlib>
#include <random>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstdio>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <unordered_set>

namespace dls::actors {

namespace rt = dls::runtime;
using clock_type = std::chrono::steady_clock;

namespace {

struct queued_request {
  rt::work_item meta;  // without its canvas (the workers hold that)
  live_request live;   // what the policies see of it
  bool active = false; // admitted: in the step candidates
  rt::request_progress told;  // the policy state last sent to the request actor
  bool told_once = false;
  double told_at_s = 0;
  bool boundary = true;
  int64_t committed = 0;
  int64_t steps = 0;
  answer_text text;             // the answer decoded so far
  int32_t streamed_blocks = 0;  // chunks numbered so far (a resumed request goes on from its block)
  std::string arrived_how;  // how it came here when migrated: canvas, rebuild, transfer, handover
  double resumed_ms = -1;   // migrated: from the source's stop to the start of its first step here
  double reached_s = 0;     // when it reached this group (the group's clock)
  std::optional<rt::migration_order> leave;  // moves at the next step boundary of its kind
};

// A request placed here mid-block whose KV cache is on its way over UCX: it joins the queue
// once every rank's shard has landed and been imported, or, when one is late, missing or
// refused, once the cache is rebuilt from the canvas of its last refresh.
struct pending_kv {
  rt::work_item item;     // the placement (its canvas travels in `canvas`)
  std::string canvas;     // checked by the enqueue handler
  std::string kv_source;  // the canvas of its last refresh: the fallback
  int32_t rows = 0;       // the canvas length: every shard holds this many rows
  canvas_progress progress;
  answer_text text;       // what earlier groups streamed of its answer
  std::vector<rt::ucx_payload> shards;  // rank order
  std::size_t left = 0;
  std::string error;      // the first shard's failure
  bool importing = false; // the workers have the shards
};

struct group_state {
  group_setup setup;
  std::map<uint64_t, queued_request> queue;
  std::deque<uint64_t> order;  // arrival order at this group
  // The same requests split into admitted and waiting ones, in arrival order (map nodes are
  // stable): each decision reads them without a lookup per request.
  std::vector<queued_request*> running, waiting;
  live_group view;             // the group as the policies see it
  policy::group_policy policy;
  const policy::step_cost_model* profile = nullptr;  // the profile, if it covers this group's degree
  // The profile plus the measured per-step overhead around the engine (messaging): what a
  // step of this group really costs, and what the policies decide with.
  std::optional<policy::step_cost_model> cost;
  double overhead_s = 0;       // moving average of measured step wall - profile prediction
  // The per-step overhead a request's SLO counts: the messaging round trip to the workers with
  // nothing else running, timed by the node's first group of this size and then fixed
  // (slo_overhead_book.hpp). The moving average above grows with contention, and a deadline
  // derived from it would loosen exactly when the group is congested; a deadline is a promise
  // made on arrival, so it uses the idle figure.
  double slo_overhead_s = 0;
  bool slo_overhead_fixed = false;  // taken from the node's book, or all rounds timed
  // The cost model deadlines derive from (the profile with slo_overhead_s on every step), built
  // again only when that figure changes, not for every request.
  std::optional<policy::step_cost_model> slo_cost;
  double slo_cost_overhead_s = -1;
  double idle_round_trip_s = 0;     // the least empty round trip this group timed
  double predicted_s = 0;      // the profile's time for the step in flight
  bool dirty = true;           // requests came or went since the last tau control
  // The accuracy budget tau control spends (policies/threshold.hpp): a running account of
  // the group's requests, kept here because the policies own no state.
  policy::accuracy_ledger ledger;
  // The group's recent arrivals, whose predicted work the tau cap counts (threshold.hpp).
  policy::load_forecast load;
  double last_control_s = -1e9;
  clock_type::time_point epoch = clock_type::now();  // the group's clock for the policies
  bool stepping = false;
  bool draining = false;
  bool drained = false;
  // Draining: evictions of requests handed back at their refresh boundary still on their way
  // (the drain ends only after them), whether the drain waits for them, and how many went.
  int handing_back = 0;
  bool drain_after_hand_back = false;
  int32_t handed_back = 0;
  bool holding = false;  // the fault hook DILASERVE_HOLD_AFTER_SNAPSHOT stopped its steps
  // DILASERVE_STEP_LOG=DIR: every step as a line of DIR/<group>.csv (common/step_log.hpp), to
  // set against the simulator's steps; the step in flight waits in `step_now`.
  std::unique_ptr<dls::step_log> step_log;
  // DILASERVE_DECISION_LOG=DIR: the input of every DILASERVE_DECISION_LOG_EVERY-th decision
  // (default decision_log_every) as a line of DIR/<group>.jsonl, for `dilaserve bench-decisions`.
  std::unique_ptr<decision_log> decisions_log;
  dls::step_record step_now;
  caf::response_promise drain_rp;
  // Measured totals for `bench-runtime` and the directory.
  uint64_t steps = 0;
  uint64_t prompt_bytes = 0, prompt_tokens = 0;  // prompts tokenized here (group_load)
  double wall_seconds = 0;    // from sending a step to the last worker's reply
  double engine_seconds = 0;  // the slowest rank's time inside engine::step
  double predicted_seconds = 0;  // the profile's time for the same steps (with a profile)
  double policy_seconds = 0;      // wall time of each decision (adapter, policies, applying it)
  double policy_cpu_seconds = 0;  // the same on this thread's CPU clock (no preemption)
  double report_seconds = 0;      // wall time of noting the policy states, once the step is out
  double report_cpu_seconds = 0;  // the same on this thread's CPU clock
  // Policy states that changed since the last load report, which carries them (tell_progress).
  std::vector<rt::progress_entry> progress_out;
  double last_report_s = -1e9;  // group clock of the last load report
  bool report_due = false;      // a report_atom is on its way for them
  // Time the group held requests with no step in flight: the loop's own cost between steps
  // (its decisions, its mailbox) and any wait for work it could not step yet.
  double idle_with_work_seconds = 0;
  std::optional<clock_type::time_point> idle_since;
  uint64_t decisions = 0;
  // Step wall times by kind: a step with a refresh row in it is a refresh step.
  bool refresh_in_flight = false;
  rt::step_histogram refresh_steps, reuse_steps;
  // Load shedding: requests no decision has seen yet, the refusals, and when tau was first
  // lowered and the first request refused (group clock; -1: not yet), so a bench can check
  // that tau went down before anyone was refused.
  std::vector<uint64_t> fresh;
  uint64_t refused = 0;
  uint64_t enqueued = 0;  // items from the supervisor that reached this group (group_load)
  uint64_t rejected_on_miss = 0;  // strict SLOs refused (on_miss: reject), apart from load shedding
  double lowest_tau = 1.0;  // the lowest unpinned tau of the last controlled decision
  double first_lowered_s = -1;
  double first_refused_s = -1;
  double backlog_s = 0;     // policy::backlog_s after the last controlled decision
  double step_s = 0;          // the expected step time of the last decision
  uint64_t migrations_in = 0, migrations_out = 0;
  // The data plane: requests waiting for their KV cache, this group's next UCX transfer id
  // (ids are per receiving process; a random start keeps the groups of one process apart),
  // and what moved: caches sent, imported, and refused (rebuilt instead).
  std::map<uint64_t, pending_kv> pending;
  uint64_t next_transfer = 0;
  uint64_t kv_sent = 0, kv_imported = 0, kv_refused = 0;
  uint64_t snapshots_to_peer = 0;  // recovery snapshots sent to this node's keeper
  // Downtimes of the migrations into this group, by how they came, the newest downtime_samples
  // of each kind: canvas rows, and ms from the source's stop to the end of the first step here
  // (what a mid-block move costs, its rebuild included) and to its start (when it runs again).
  struct downtime_sample {
    int32_t rows = 0;
    double to_step_end_ms = 0;
    double to_step_start_ms = 0;
  };
  std::map<std::string, std::deque<downtime_sample>> downtime;
  // The requests that left this group lately, newest last, so that a migration order that
  // comes after its request left says why it was dropped.
  struct recent_end {
    uint64_t id = 0;
    const char* how = "";
    clock_type::time_point at;
  };
  std::deque<recent_end> recent_ends;
  static inline const char* name = "dls.tp_group";
};

using group_ptr = caf::stateful_actor<group_state>*;

constexpr auto step_timeout = std::chrono::minutes(5);

// Requests remembered after they left, for the reason a late migration order names: about two
// seconds of the shipped model's requests at a node's full rate (about 450 per second), 24 bytes
// each. The supervisor orders a move of a request it believes runs here, so an order comes at
// most a messaging delay (milliseconds; seconds on a starved machine) after its request left.
constexpr std::size_t recent_ends_kept = 1024;

// Migration downtimes kept per kind for `status` (and bench-migration's live figures): enough
// for a p99 over the last few hundred moves, a few KB in every load report.
constexpr std::size_t downtime_samples = 256;

int64_t unix_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Weight of one step's residual in the overhead average: about the last 20 steps count, so a
// change of load shows within a second while one slow step moves it little.
constexpr double overhead_weight = 0.05;

// Empty round trips a starting group times for the overhead its SLOs count (the least is kept):
// enough that one of them sees the workers awake, each a fraction of a millisecond.
constexpr int slo_overhead_rounds = 5;

// A change of only the next step kind is noted at most this often (the kind flips twice per
// block, and every note ends as a directory update at the head), and notes alone send a load
// report at most this often.
constexpr double kind_report_interval_s = 0.1;

// DILASERVE_DECISION_LOG writes one decision in this many by default: a record holds every
// request of the group (a few hundred bytes each), so logging them all would write megabytes a
// second under load.
constexpr int decision_log_every = 10;

// A request without an SLO and without a profile to derive one has no deadline: this many
// seconds stands for "never" and keeps the policies' arithmetic finite.
constexpr double no_deadline_s = 1e9;

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double now_s(const group_state& st) {
  return std::chrono::duration<double>(clock_type::now() - st.epoch).count();
}

void set_policy(group_state& st, const std::string& name) {
  st.policy = policy::make_group_policy(policy::make_policy_set(name), st.setup.policy->knobs);
  st.ledger.restart();
}

gpu::decode_params params_for(const rt::engine_defaults& d, const rt::work_item& item) {
  gpu::decode_params p = rt::with_request(d.decode, item);
  p.threshold = item.threshold;
  return p;
}

// A request's policy state now; the slack is the one at this moment.
rt::request_progress progress_now(const group_state& st, const queued_request& q, double now, double step_s) {
  rt::request_progress p;
  p.tau = q.live.tau;
  p.deadline_ms = 1e3 * (q.live.deadline_s - q.live.arrival_s);
  p.slack_ms = 1e3 * policy::slack_s(view_of(q.live), now, st.setup.policy->quality, step_s);
  p.next_kind = q.live.progress.next_refresh ? "refresh" : "reuse";
  return p;
}

void report_load(group_ptr self) {
  auto& st = self->state;
  if (!st.setup.supervisor) return;
  double work = 0;
  for (auto& [id, q] : st.queue) work += static_cast<double>(q.meta.gen_length - q.committed);
  // Step totals ride along so the directory (and bench-runtime) can show the share of
  // step time spent in actor messaging rather than in the engine.
  rt::group_load l;
  l.work = work;
  l.queued = static_cast<int32_t>(st.queue.size());
  l.enqueued = st.enqueued;
  l.prompt_bytes = st.prompt_bytes;
  l.prompt_tokens = st.prompt_tokens;
  l.steps = st.steps;
  l.step_wall_s = st.wall_seconds;
  l.idle_with_work_s = st.idle_with_work_seconds;
  l.engine_s = st.engine_seconds;
  l.predicted_s = st.predicted_seconds;
  l.policy_s = st.policy_seconds;
  l.policy_cpu_s = st.policy_cpu_seconds;
  l.report_s = st.report_seconds;
  l.report_cpu_s = st.report_cpu_seconds;
  l.decisions = st.decisions;
  l.policy = st.policy.name;
  l.tau_cap = st.view.tau_cap;
  l.step_overhead_s = st.overhead_s;
  l.slo_step_overhead_s = st.slo_overhead_s;
  l.refresh = st.refresh_steps;
  l.reuse = st.reuse_steps;
  l.refused = st.refused;
  l.rejected_on_miss = st.rejected_on_miss;
  l.lowest_tau = st.lowest_tau;
  l.first_tau_lowered_s = st.first_lowered_s;
  l.first_refused_s = st.first_refused_s;
  l.backlog_s = st.backlog_s;
  l.tau_ref = st.policy.thr.tau_max;
  l.shed_grace = st.policy.sched.missed_grace;
  l.sheds = st.policy.refuse_overload && st.cost.has_value();
  l.migrations_in = st.migrations_in;
  l.migrations_out = st.migrations_out;
  l.kv_sent = st.kv_sent;
  l.kv_imported = st.kv_imported;
  l.kv_refused = st.kv_refused;
  l.snapshots_to_peer = st.snapshots_to_peer;
  for (const auto& [how, samples] : st.downtime)
    for (const auto& d : samples) {
      l.downtime_rows[how].push_back(d.rows);
      l.downtime_ms[how].push_back(d.to_step_end_ms);
      l.downtime_start_ms[how].push_back(d.to_step_start_ms);
    }
  // The newest note of each request still here: an answer carries the last state of one that
  // finished, and an older note of the same request would be overwritten at the head anyway.
  std::unordered_set<uint64_t> noted;
  for (auto e = st.progress_out.rbegin(); e != st.progress_out.rend(); ++e)
    if (auto q = st.queue.find(e->request_id);
        q != st.queue.end() && q->second.meta.epoch == e->epoch && noted.insert(e->request_id).second)
      l.progress.push_back(std::move(*e));
  std::reverse(l.progress.begin(), l.progress.end());
  st.progress_out.clear();
  st.last_report_s = now_s(st);
  self->send(st.setup.supervisor, rt::load_atom::value, st.setup.name, std::move(l));
}

void note_end(group_state& st, uint64_t id, const char* how) {
  st.recent_ends.push_back({id, how, clock_type::now()});
  if (st.recent_ends.size() > recent_ends_kept) st.recent_ends.pop_front();
}

// Why an order to move request `id` finds it not queued here.
std::string why_not_queued(const group_state& st, uint64_t id) {
  if (st.draining) return "this group is being regrouped, which moves it anyway";
  if (st.pending.count(id)) return "it is still waiting here for its KV cache";
  for (auto e = st.recent_ends.rbegin(); e != st.recent_ends.rend(); ++e)
    if (e->id == id) {
      const auto ms = std::chrono::duration<double, std::milli>(clock_type::now() - e->at).count();
      return std::string("it ") + e->how + " here " + std::to_string(static_cast<int64_t>(ms)) +
             " ms before the order came";
    }
  return "no such request is queued here, nor among the last " + std::to_string(recent_ends_kept) + " to leave";
}

void remove(group_ptr self, uint64_t id, const char* how) {
  auto& st = self->state;
  note_end(st, id, how);
  auto it = st.queue.find(id);
  if (it != st.queue.end()) {
    // A finished request has nothing uncommitted left, so this releases only what one that
    // leaves early had reserved.
    st.ledger.leave(view_of(it->second.live), st.setup.policy->quality);
    for (auto* list : {&st.running, &st.waiting})
      list->erase(std::remove(list->begin(), list->end(), &it->second), list->end());
    st.queue.erase(it);
  }
  st.dirty = true;
  st.order.erase(std::remove(st.order.begin(), st.order.end(), id), st.order.end());
  step_order o{{id}};
  for (auto& w : st.setup.workers) self->send(w, drop_atom::value, o);
}

void kick(group_ptr self);

// The answer text of a canvas's completed blocks: what its earlier groups have streamed, so a
// resumed request streams only what follows.
// The text of a resumed canvas's completed blocks: streamed before, so not streamed again.
answer_text streamed_text_of(const gpu::tokenizer& tok, const gpu::canvas& c) {
  auto ids = c.answer();
  const auto done = static_cast<std::size_t>(std::max(0, c.block_begin() - c.prompt_len));
  if (!c.finished && ids.size() > done) ids.resize(done);
  answer_text t(tok);
  t.advance(ids);
  return t;
}

// Queues a request this group admitted on its workers (fresh, resumed or handed over).
queued_request& add_request(group_ptr self, rt::work_item item, const canvas_progress& progress) {
  auto& st = self->state;
  const auto& ctx = *st.setup.policy;
  auto id = item.request_id;
  queued_request q;
  auto& lr = q.live;
  lr.id = id;
  lr.group = st.view.id;
  lr.progress = progress;
  q.reached_s = now_s(st);
  lr.arrival_s = q.reached_s - item.age_ms / 1e3;
  if (item.deadline_ms > 0) {
    lr.deadline_s = lr.arrival_s + item.deadline_ms / 1e3;
  } else if (ctx.cost && ctx.cost->supports(1)) {
    if (!st.slo_cost || st.slo_cost_overhead_s != st.slo_overhead_s) {
      st.slo_cost = policy::with_step_overhead(*ctx.cost, 1, st.slo_overhead_s);
      st.slo_cost_overhead_s = st.slo_overhead_s;
    }
    lr.deadline_s = policy::slo_deadline_s(lr.arrival_s, ctx.slo_scale, *st.slo_cost, ctx.quality, progress.prompt_len,
                                           progress.gen_len, progress.block_len, ctx.knobs.tau_max,
                                           item.slo_request_overhead_ms / 1e3);
  } else {
    lr.deadline_s = lr.arrival_s + no_deadline_s;
  }
  lr.tau = item.threshold;
  lr.tau_pinned = tau_held(item, progress);
  lr.tau_floor = item.min_threshold;
  lr.tau_low = item.tau_low;
  lr.reject_on_miss = item.reject_on_miss;
  item.canvas.clear();
  item.kv_canvas.clear();
  q.meta = std::move(item);
  auto& slot = st.queue[id] = std::move(q);
  st.order.push_back(id);
  st.waiting.push_back(&slot);
  st.ledger.enter(view_of(slot.live), ctx.quality);
  st.dirty = true;
  return slot;
}

// The request's meta as the next group must see it: age, deadline and tau as they are now.
rt::work_item meta_now(const group_state& st, const queued_request& q) {
  auto item = q.meta;
  const auto& lr = q.live;
  item.age_ms = 1e3 * (now_s(st) - lr.arrival_s);
  item.deadline_ms = 1e3 * (lr.deadline_s - lr.arrival_s);
  item.threshold = lr.tau;
  item.tau_low = lr.tau_low;
  return item;
}

// The requests still waiting here for their KV cache, as placements for another group: the
// cache is rebuilt there from the canvas of its last refresh. Shards landing later are dropped.
std::vector<rt::work_item> take_pending(group_state& st) {
  std::vector<rt::work_item> out;
  for (auto& [id, p] : st.pending) {
    auto item = p.item;
    item.canvas.assign(p.canvas.begin(), p.canvas.end());
    item.kv_canvas.assign(p.kv_source.begin(), p.kv_source.end());
    item.kv = {};
    out.push_back(std::move(item));
  }
  st.pending.clear();
  return out;
}

void finish_drain(group_ptr self) {
  auto& st = self->state;
  if (st.drained) return;
  if (st.handing_back > 0) {  // their canvases must reach the supervisor before this group ends
    st.drain_after_hand_back = true;
    return;
  }
  st.drained = true;
  std::vector<uint64_t> ids(st.order.begin(), st.order.end());
  // Rank 0's canvases travel; the other ranks drop theirs.
  step_order o{ids};
  for (std::size_t r = 1; r < st.setup.workers.size(); ++r) self->send(st.setup.workers[r], drop_atom::value, o);
  self->request(st.setup.workers[0], step_timeout, evict_atom::value, o).then([=](canvas_bundle& b) {
    auto& st = self->state;
    std::vector<rt::work_item> items;
    for (auto& [id, q] : st.queue) st.ledger.leave(view_of(q.live), st.setup.policy->quality);
    for (auto& [id, bytes] : b.canvases) {
      auto it = st.queue.find(id);
      if (it == st.queue.end()) continue;
      auto item = meta_now(st, it->second);
      item.canvas.assign(bytes.begin(), bytes.end());
      items.push_back(std::move(item));
    }
    for (auto& item : take_pending(st)) items.push_back(std::move(item));
    st.queue.clear();
    st.order.clear();
    st.running.clear();
    st.waiting.clear();
    st.drain_rp.deliver(caf::make_message(std::move(items), st.handed_back));
  }, [=](caf::error& e) {
    // Without rank 0's canvases these requests cannot move: end them explicitly.
    auto& st = self->state;
    for (auto& [id, q] : st.queue) st.ledger.leave(view_of(q.live), st.setup.policy->quality);
    for (auto& [id, q] : st.queue)
      self->send(q.meta.request, rt::failed_atom::value, q.meta.epoch, "lost during regroup: " + to_string(e));
    st.queue.clear();
    st.order.clear();
    st.running.clear();
    st.waiting.clear();
    st.drain_rp.deliver(caf::make_message(take_pending(st), st.handed_back));
  });
}

// A draining group hands every request at its refresh boundary back to the supervisor as a
// canvas (its KV cache would be recomputed by that refresh anyway), which places it on a
// group of another node, or keeps it until this node's new groups are up. Only the requests
// inside a block step on here (decide_step), so the drain ends once they reach their
// boundaries, and no request waits out the regroup on this node while another node can take
// it. The simulator drains the same way (tools/sim/sim_control.cpp, leave_at_boundaries).
void hand_back_at_boundaries(group_ptr self) {
  auto& st = self->state;
  std::vector<uint64_t> ids;
  for (auto id : st.order)
    if (auto& q = st.queue.at(id); q.live.progress.next_refresh && !q.leave) ids.push_back(id);
  if (ids.empty()) return;
  auto leaving = std::make_shared<std::map<uint64_t, queued_request>>();
  for (auto id : ids) {
    auto it = st.queue.find(id);
    st.ledger.leave(view_of(it->second.live), st.setup.policy->quality);
    for (auto* list : {&st.running, &st.waiting})
      list->erase(std::remove(list->begin(), list->end(), &it->second), list->end());
    leaving->emplace(id, std::move(it->second));
    st.queue.erase(it);
    note_end(st, id, "handed back (drain)");
  }
  st.order.erase(std::remove_if(st.order.begin(), st.order.end(), [&](uint64_t id) { return leaving->count(id) > 0; }),
                 st.order.end());
  st.dirty = true;
  // Rank 0's canvases travel; the other ranks drop theirs.
  step_order o{ids};
  for (std::size_t r = 1; r < st.setup.workers.size(); ++r) self->send(st.setup.workers[r], drop_atom::value, o);
  ++st.handing_back;
  auto settled = [=] {
    auto& st = self->state;
    if (--st.handing_back == 0 && st.drain_after_hand_back) finish_drain(self);
  };
  self->request(st.setup.workers[0], step_timeout, evict_atom::value, o)
      .then(
          [=](canvas_bundle& b) {
            auto& st = self->state;
            for (auto& [id, bytes] : b.canvases) {
              auto it = leaving->find(id);
              if (it == leaving->end()) continue;
              auto item = meta_now(st, it->second);
              item.canvas.assign(bytes.begin(), bytes.end());
              self->send(st.setup.supervisor, rt::drain_atom::value, std::move(item));
              ++st.handed_back;
              leaving->erase(it);
            }
            for (auto& [id, q] : *leaving)  // rank 0 had no canvas for it: end it explicitly
              self->send(q.meta.request, rt::failed_atom::value, q.meta.epoch, std::string("lost during regroup: no canvas"));
            settled();
          },
          [=](caf::error& e) {
            for (auto& [id, q] : *leaving)
              self->send(q.meta.request, rt::failed_atom::value, q.meta.epoch, "lost during regroup: " + to_string(e));
            settled();
          });
}

// A migrated request's first step here ended: the move's downtime, on the system clock both
// processes share when they run on one host (across hosts it mixes two clocks).
void note_downtime(group_state& st, queued_request& q) {
  auto& list = st.downtime[q.arrived_how.empty() ? "canvas" : q.arrived_how];
  const double end_ms = static_cast<double>(unix_now_us() - q.meta.moved_at_us) / 1e3;
  list.push_back({q.live.progress.prompt_len + q.live.progress.gen_len, end_ms,
                  q.resumed_ms >= 0 ? q.resumed_ms : end_ms});
  if (list.size() > downtime_samples) list.pop_front();
  q.meta.moved_at_us = 0;
}

// `n` consecutive UCX transfer ids for this group. Ids are per receiving process; a random
// start keeps the groups of one process apart, and the top bit stays clear: it marks the
// transfers nobody awaits by id (a peer-kept snapshot).
uint64_t take_transfer_ids(group_state& st, std::size_t n) {
  if (st.next_transfer == 0) {
    std::random_device rd;
    st.next_transfer = (((uint64_t{rd()} << 32) | rd()) | 1) & ~(rt::ucx_transport::unasked_bit | (uint64_t{1} << 62));
  }
  const uint64_t first = st.next_transfer;
  st.next_transfer += n;
  return first;
}

// The node a group runs on: group names are "<node>/g<n>" and node names hold no '/'.
std::string node_of_group(const std::string& group) { return group.substr(0, group.find('/')); }

// For the recovery tests (docs/runtime.md, "Recovery"): the groups of the node that
// DILASERVE_HOLD_AFTER_SNAPSHOT names stop stepping once they sent a snapshot, as a node that
// hangs right after one, so a test kills it while it surely holds a request mid-run that has a
// snapshot, however fast the machine decodes. The process stays up, so the snapshot reaches its
// keeper. Unset in production.
bool holds_after_snapshot(const std::string& group) {
  static const std::string node = [] {
    const char* n = std::getenv("DILASERVE_HOLD_AFTER_SNAPSHOT");
    return std::string(n ? n : "");
  }();
  return !node.empty() && node_of_group(group) == node;
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
  const uint64_t id = take_transfer_ids(st, 1) | rt::ucx_transport::unasked_bit;
  const auto deadline = rt::ucx_transport::clock::now() + std::chrono::milliseconds(st.setup.ucx->config().timeout_ms);
  // The request hears of it only once UCX has sent it: told earlier (its first buffer to the
  // keeper waits for the endpoints' wireup), a request whose node died meanwhile asked the keeper
  // for a snapshot that had not left (CI, once).
  auto me = caf::actor_cast<caf::actor>(self);
  st.setup.ucx->send(st.setup.keeper_address, id, std::make_shared<const std::string>(rt::encode_peer_snapshot(snap)),
                     deadline,
                     [me, req, epoch = q.meta.epoch, keeper = st.setup.keeper_node, steps, tokens,
                      name = st.setup.name, rid = q.meta.request_id](const std::string& e) {
                       if (!e.empty()) {
                         rt::log_line(name, "snapshot of request " + std::to_string(rid) + " not kept: " + e);
                         return;
                       }
                       caf::send_as(me, req, rt::snapshot_atom::value, epoch, keeper, steps, tokens);
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

// Notes each request's policy state when its tau or next step kind changed (or on the first
// decision), so `actors` can show them without a message per step. The notes ride the next
// load report, which goes out at once when the last one is older than the kind's report
// interval: the head gets no message per request for them.
void tell_progress(group_ptr self, double now, double step_s, const std::vector<queued_request*>& which) {
  auto& st = self->state;
  for (auto* qp : which) {
    auto& q = *qp;
    const char* kind = q.live.progress.next_refresh ? "refresh" : "reuse";
    if (q.told_once && q.live.tau == q.told.tau &&
        (q.told.next_kind == kind || now - q.told_at_s < kind_report_interval_s))
      continue;
    q.told = progress_now(st, q, now, step_s);
    q.told_once = true;
    q.told_at_s = now;
    st.progress_out.push_back({q.meta.request_id, q.meta.epoch, q.told});
  }
  if (st.progress_out.empty()) return;
  const double wait_s = st.last_report_s + kind_report_interval_s - now;
  if (wait_s <= 0) {
    report_load(self);
  } else if (!st.report_due) {
    // A group that takes no further step (held, or waiting on a KV cache) sends them anyway.
    st.report_due = true;
    self->delayed_send(self, std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(wait_s)),
                       report_atom::value);
  }
}

// Whether a request with a migration order is at the step boundary the order waits for.
bool ready_to_leave(const queued_request& q) {
  // "boundary" and "mid-block" wait for the request's first step: before it, moving it is
  // moving its prompt.
  const auto& at = q.leave->at;
  const bool refresh_next = q.live.progress.next_refresh;
  if (at == "boundary") return q.steps > 0 && refresh_next;
  if (at == "mid-block") return q.steps > 0 && !refresh_next;
  return true;
}

// For the fault tests (docs/runtime.md, "Data plane"): DILASERVE_KV_FAULT is a comma-separated list of
// faults the KV moves of this process take in turn: stall withholds the shards, corrupt sends
// them with a header that lies about their shape (twice the rows, half the width: the same
// size), truncate sends half of each. Unset in production.
std::string next_kv_fault() {
  static const std::vector<std::string> faults = [] {
    std::vector<std::string> out;
    const char* f = std::getenv("DILASERVE_KV_FAULT");
    std::string list = f ? f : "";
    for (std::size_t at = 0; at < list.size();) {
      auto end = list.find(',', at);
      if (end == std::string::npos) end = list.size();
      if (end > at) out.push_back(list.substr(at, end - at));
      at = end + 1;
    }
    return out;
  }();
  static std::atomic<std::size_t> next{0};
  return faults.empty() ? std::string() : faults[next++ % faults.size()];
}

std::string ms_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f ms", 1e3 * s);
  return b;
}

// Mid-block to another process (or to a group of another degree in this one): sends every
// rank's KV cache, cut for the destination's degree, to the destination's UCX address and
// announces the transfer ids in `h`, when the profile's measured link says moving it beats one
// refresh at the destination (or ucx.kv_move says "transfer"). Returns "" when sent, else why
// not; the destination then rebuilds the cache from `h.kv_canvas`.
std::string send_kv(group_ptr self, const rt::migration_order& order, const std::vector<held_slot_ptr>& held,
                    const std::string& peer, const std::string& peer_error, rt::migration_handoff& h,
                    std::string& decided) {
  auto& st = self->state;
  const auto& ucx = *st.setup.ucx;
  if (peer.empty()) return "no UCX address for " + node_of_group(order.to) + ": " + peer_error;
  const auto& c = held[0]->slot.c;
  std::vector<std::string> shards;
  double bytes = 0;
  for (const auto& slot : held) {
    shards.push_back(slot->slot.cache->export_bytes());
    bytes += static_cast<double>(shards.back().size());
  }
  if (ucx.config().kv_move == "auto") {
    const auto& ctx = *st.setup.policy;
    if (!ctx.cost) return "no step-cost profile to compare a transfer with";
    const auto* link = policy::measured_link(ctx.cost->transfer, ucx.config().tls);
    if (!link)
      return "the profile has no link measured with ucx.tls " + ucx.config().tls +
             " (`dilaserve bench-migration --profile FILE` or `up` measure one)";
    policy::kv_move_choice choice;
    try {
      choice = policy::compare_kv_move(bytes, *link, *ctx.cost, order.to_degree, c.length(), c.params.block_length);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    if (!choice.transfer)
      return "recompute " + ms_text(choice.recompute_s) + " beats transfer " + ms_text(choice.transfer_s);
    decided = ": transfer " + ms_text(choice.transfer_s) + " < recompute " + ms_text(choice.recompute_s);
  }
  const auto to = static_cast<std::size_t>(order.to_degree);
  if (to != shards.size()) {
    std::vector<std::string_view> views(shards.begin(), shards.end());
    try {
      shards = gpu::reshard_kv(views, order.to_degree, st.setup.model->config.head_dim());
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
  }
  const uint64_t first = take_transfer_ids(st, to);
  const auto fault = next_kv_fault();
  const auto deadline = rt::ucx_transport::clock::now() + std::chrono::milliseconds(ucx.config().timeout_ms);
  for (std::size_t r = 0; r < to; ++r) {
    auto& b = shards[r];
    if (fault == "corrupt" && b.size() >= gpu::kv_header_bytes) {
      int32_t dims[3];
      std::memcpy(dims, b.data(), sizeof dims);
      dims[1] *= 2;
      dims[2] /= 2;
      std::memcpy(b.data(), dims, sizeof dims);
    } else if (fault == "truncate") {
      b.resize(b.size() / 2);
    }
    if (fault == "stall") {
      rt::log_line(st.setup.name, "KV shard " + std::to_string(r) + " withheld (DILASERVE_KV_FAULT=stall)");
      continue;
    }
    const uint64_t t = first + r;
    st.setup.ucx->send(peer, t, std::make_shared<const std::string>(std::move(b)), deadline,
                       [name = st.setup.name, t](const std::string& e) {
                         if (!e.empty()) rt::log_line(name, "KV transfer " + std::to_string(t) + " failed: " + e);
                       });
  }
  h.how = "transfer";
  h.kv = {first, order.to_degree, node_of_group(order.to)};
  st.kv_sent += 1;
  return "";
}

// The move of one request that has left this group's queue: every rank gives its slot up
// (by ownership). Mid-block to a group of this process with the same degree the slots move
// on as they are (no copy, nothing recomputed); otherwise the request actor gets the canvas,
// and mid-block also the canvas of its last refresh (from which the destination can rebuild the
// KV cache exactly) and, when send_kv sent the cache over UCX, its transfer ids.
void depart(group_ptr self, queued_request q) {
  auto& st = self->state;
  const auto order = *q.leave;
  const bool mid_block = !q.live.progress.next_refresh;
  const bool same_process = order.to_handle && order.to_handle.node() == self->node();
  const bool handover = mid_block && same_process && order.to_degree == static_cast<int32_t>(st.setup.workers.size());
  const bool kv_candidate = mid_block && !handover && st.setup.ucx && st.setup.ucx->config().kv_move != "rebuild";
  const bool ask_address = kv_candidate && !same_process && st.setup.head;
  const auto k = st.setup.workers.size();
  auto held = std::make_shared<std::vector<held_slot_ptr>>(k);
  auto left = std::make_shared<std::size_t>(k + (ask_address ? 1 : 0));
  auto failed = std::make_shared<std::string>();
  auto peer = std::make_shared<std::string>(kv_candidate && same_process ? st.setup.ucx->address() : "");
  auto peer_error = std::make_shared<std::string>(kv_candidate && !ask_address && !same_process
                                                      ? "no head to ask for the address"
                                                      : "");
  auto meta = meta_now(st, q);
  meta.moved_at_us = unix_now_us();  // "stop": it takes no step here any more
  auto moved = std::make_shared<queued_request>(std::move(q));
  auto via_request_actor = [=](const std::string& why_not_handover) {
    auto& st = self->state;
    const auto& rank0 = (*held)[0];
    rt::migration_handoff h{st.setup.name, order.to, "canvas", order.reason, static_cast<int32_t>(moved->steps),
                            {}, {}, {}, meta.moved_at_us, meta.tau_low};
    auto bytes = rank0->slot.c.to_bytes();
    h.canvas.assign(bytes.begin(), bytes.end());
    if (!rank0->slot.c.at_refresh_boundary()) {
      if (!rank0->refresh_input) {
        self->send(meta.request, rt::failed_atom::value, meta.epoch,
                   std::string("lost during migration: no canvas of its last refresh"));
        return;
      }
      auto kv = rank0->refresh_input->to_bytes();
      h.kv_canvas.assign(kv.begin(), kv.end());
      h.how = "rebuild";
      if (kv_candidate) {
        std::string decided = " (ucx.kv_move: transfer)";
        const auto why_not = send_kv(self, order, *held, *peer, *peer_error, h, decided);
        rt::log_line(st.setup.name, "request " + std::to_string(meta.request_id) + " to " + order.to + " mid-block: " +
                                        (why_not.empty() ? "KV cache sent over UCX" + decided
                                                         : "KV cache rebuilt there, " + why_not));
      }
    }
    if (!why_not_handover.empty()) h.reason += " (" + why_not_handover + ")";
    st.migrations_out += 1;
    self->send(meta.request, rt::migrate_atom::value, meta.epoch, h);
    report_load(self);
  };
  auto all_released = [=] {
    auto& st = self->state;
    if (!failed->empty()) {
      self->send(meta.request, rt::failed_atom::value, meta.epoch, "lost during migration: " + *failed);
      return;
    }
    if (!handover) {
      via_request_actor("");
      return;
    }
    group_handover h;
    h.meta = meta;
    h.slots = *held;
    h.progress = moved->live.progress;
    h.committed = moved->committed;
    h.steps = moved->steps;
    h.text = std::move(moved->text);
    h.streamed_blocks = moved->streamed_blocks;
    h.from = st.setup.name;
    self->request(order.to_handle, std::chrono::seconds(10), handover_atom::value, std::move(h))
        .then(
            [=](bool) {
              auto& st = self->state;
              st.migrations_out += 1;
              rt::migration_handoff note{st.setup.name, order.to, "handover", order.reason,
                                         static_cast<int32_t>(moved->steps), {}, {}, {}, meta.moved_at_us};
              self->send(meta.request, rt::migrate_atom::value, meta.epoch, note);
              report_load(self);
            },
            // The destination went away: the request goes on from its canvas through its actor.
            [=](caf::error& e) { via_request_actor("hand-over refused: " + to_string(e)); });
  };
  // The destination's address is asked for while the ranks let go.
  if (ask_address)
    self->request(st.setup.head, std::chrono::seconds(10), rt::ucx_atom::value, node_of_group(order.to))
        .then(
            [=](std::string& address) {
              *peer = std::move(address);
              if (--*left == 0) all_released();
            },
            [=](caf::error& e) {
              *peer_error = to_string(e);
              if (--*left == 0) all_released();
            });
  for (std::size_t r = 0; r < k; ++r)
    self->request(st.setup.workers[r], step_timeout, release_atom::value, moved->meta.request_id)
        .then(
            [=](held_slot_ptr& p) {
              (*held)[r] = std::move(p);
              if (--*left == 0) all_released();
            },
            [=](caf::error& e) {
              if (failed->empty()) *failed = to_string(e);
              if (--*left == 0) all_released();
            });
}

// A migrated request joins this group's queue once its workers hold it (fresh canvas,
// rebuilt cache or imported one).
void join_queue(group_ptr self, pending_kv p, const char* how) {
  auto& st = self->state;
  if (!p.item.moved_from.empty()) st.migrations_in += 1;
  auto& q = add_request(self, std::move(p.item), p.progress);
  q.arrived_how = how;
  q.text = std::move(p.text);
  q.streamed_blocks = p.progress.block;
  report_load(self);
  kick(self);
}

// The KV cache did not come (deadline, dead source), or came wrong: every rank rebuilds it
// from the canvas of its last refresh, which gives the same tokens one refresh later.
void rebuild_instead(group_ptr self, pending_kv p, const std::string& why) {
  auto& st = self->state;
  const auto id = p.item.request_id;
  st.kv_refused += 1;
  rt::log_line(st.setup.name, "request " + std::to_string(id) + ": KV cache refused (" + why +
                                  "); rebuilding it from the canvas of its last refresh");
  for (auto& w : st.setup.workers) self->send(w, admit_atom::value, id, p.canvas, p.kv_source);
  join_queue(self, std::move(p), "rebuild");
}

// Why the process's copy of a KV cache in flight is not for this group, or "".
std::string kv_claim_problem(const group_state& st, const rt::kv_in_flight& kv) {
  if (!st.setup.ucx) return "this process runs no UCX transport";
  if (kv.node != st.setup.node) return "it was sent to node " + kv.node;
  if (kv.shards != static_cast<int32_t>(st.setup.workers.size()))
    return "it was cut for TP " + std::to_string(kv.shards) + ", this group is TP " +
           std::to_string(st.setup.workers.size());
  return "";
}

// Whether shard `r` fits rank r of this group for a canvas of `rows` tokens ("" or why not):
// an import of another shape would leave the cache silently wrong.
std::string kv_shape_problem(const group_state& st, const rt::ucx_payload& shard, std::size_t r, int32_t rows) {
  const auto& cfg = st.setup.model->config;
  const auto k = static_cast<int32_t>(st.setup.workers.size());
  gpu::kv_dims d;
  try {
    d = gpu::parse_kv_wire(shard.view());
  } catch (const std::invalid_argument& e) {
    return "shard " + std::to_string(r) + ": " + e.what();
  }
  const int32_t width = cfg.n_kv_heads / k * cfg.head_dim();
  if (d.layers != cfg.n_layers || d.rows != rows || d.width != width)
    return "shard " + std::to_string(r) + " is " + std::to_string(d.layers) + "x" + std::to_string(d.rows) + "x" +
           std::to_string(d.width) + ", rank " + std::to_string(r) + " needs " + std::to_string(cfg.n_layers) + "x" +
           std::to_string(rows) + "x" + std::to_string(width) + " (layers x rows x width)";
  return "";
}

// Waits for the shards of a placement's KV cache, one per rank, until the transfer deadline;
// the progress thread hands each to this group as a message.
void await_kv(group_ptr self, pending_kv p) {
  auto& st = self->state;
  const auto id = p.item.request_id;
  const auto epoch = p.item.epoch;
  const auto first = p.item.kv.transfer;
  const auto k = st.setup.workers.size();
  p.shards.resize(k);
  p.left = k;
  st.pending.insert_or_assign(id, std::move(p));
  const auto deadline =
      rt::ucx_transport::clock::now() + std::chrono::milliseconds(st.setup.ucx->config().timeout_ms);
  auto me = caf::actor_cast<caf::actor>(self);
  for (std::size_t r = 0; r < k; ++r)
    st.setup.ucx->receive(first + r, deadline, [me, id, epoch, r](const std::string& e, rt::ucx_payload payload) {
      caf::send_as(me, me, kv_landed_atom::value, id, epoch, static_cast<int32_t>(r), e, std::move(payload));
    });
}

void on_kv_landed(group_ptr self, uint64_t id, uint32_t epoch, std::size_t rank, const std::string& error,
                  rt::ucx_payload payload) {
  auto& st = self->state;
  auto it = st.pending.find(id);
  if (it == st.pending.end() || it->second.item.epoch != epoch || it->second.importing) return;  // left meanwhile
  auto& p = it->second;
  if (!error.empty()) {
    if (p.error.empty()) p.error = error;
  } else if (rank < p.shards.size()) {
    p.shards[rank] = std::move(payload);
  }
  if (--p.left > 0) return;
  std::string why = p.error;
  for (std::size_t r = 0; why.empty() && r < p.shards.size(); ++r) why = kv_shape_problem(st, p.shards[r], r, p.rows);
  if (!why.empty()) {
    auto ready = std::move(p);
    st.pending.erase(it);
    rebuild_instead(self, std::move(ready), why);
    return;
  }
  p.importing = true;
  const auto k = st.setup.workers.size();
  auto left = std::make_shared<std::size_t>(k);
  auto failed = std::make_shared<std::string>();
  auto done = [=] {
    auto& st = self->state;
    auto it = st.pending.find(id);
    if (it == st.pending.end() || it->second.item.epoch != epoch) {
      // Handed on by a drain meanwhile: what the workers imported goes.
      step_order o{{id}};
      for (auto& w : st.setup.workers) self->send(w, drop_atom::value, o);
      return;
    }
    auto ready = std::move(it->second);
    st.pending.erase(it);
    ready.shards.clear();  // the receive buffers go back to the transport's pool
    if (!failed->empty()) {
      rebuild_instead(self, std::move(ready), *failed);
      return;
    }
    st.kv_imported += 1;
    join_queue(self, std::move(ready), "transfer");
  };
  for (std::size_t r = 0; r < k; ++r)
    self->request(st.setup.workers[r], step_timeout, admit_atom::value, id, p.canvas, p.kv_source, p.shards[r])
        .then(
            [=](std::string& e) {
              if (!e.empty() && failed->empty()) *failed = e;
              if (--*left == 0) done();
            },
            [=](caf::error& e) {
              if (failed->empty()) *failed = "worker " + std::to_string(r) + ": " + to_string(e);
              if (--*left == 0) done();
            });
}

// Takes the requests whose migration is due out of the queue, between two steps.
void start_migrations(group_ptr self) {
  auto& st = self->state;
  std::vector<uint64_t> due;
  for (auto& [id, q] : st.queue)
    if (q.leave && ready_to_leave(q)) due.push_back(id);
  for (auto id : due) {
    auto it = st.queue.find(id);
    st.ledger.leave(view_of(it->second.live), st.setup.policy->quality);
    queued_request q = std::move(it->second);
    for (auto* list : {&st.running, &st.waiting})
      list->erase(std::remove(list->begin(), list->end(), &it->second), list->end());
    st.queue.erase(it);
    st.order.erase(std::remove(st.order.begin(), st.order.end(), id), st.order.end());
    st.dirty = true;
    note_end(st, id, "moved on");
    depart(self, std::move(q));
  }
}

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

caf::behavior tp_group(group_ptr self, group_setup setup) {
  auto& st = self->state;
  st.setup = std::move(setup);
  self->set_exception_handler([=](std::exception_ptr& eptr) -> caf::error {
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      rt::log_line(self->state.setup.name, std::string("fatal: ") + e.what());
    }
    return caf::make_error(caf::sec::runtime_error);
  });
  st.view.id = st.setup.group_index;
  st.view.tp = static_cast<int>(st.setup.workers.size());
  st.view.devices.assign(st.setup.devices.begin(), st.setup.devices.end());
  const auto& ctx = *st.setup.policy;
  st.view.tau_cap = ctx.knobs.tau_max;
  st.ledger.budget = ctx.knobs.accuracy_budget;
  st.ledger.tau_ref = ctx.knobs.tau_max;
  st.load.cfg.window_s = ctx.knobs.cap_forecast_s;
  st.load.refresh_s = ctx.knobs.cap_forecast_refresh_s;
  if (ctx.cost && ctx.cost->supports(st.view.tp)) {
    st.profile = &*ctx.cost;
    st.cost = *ctx.cost;
    st.view.kv_capacity_tokens = st.profile->kv_capacity_tokens(st.view.tp);
  } else if (ctx.cost) {
    rt::log_line(st.setup.name, "the step-cost profile has no TP degree " + std::to_string(st.view.tp) +
                                    ": this group decides without step costs");
  }
  set_policy(st, ctx.initial_policy);
  if (const char* dir = std::getenv("DILASERVE_DECISION_LOG"); dir && *dir) {
    int every = decision_log_every;
    if (const char* e = std::getenv("DILASERVE_DECISION_LOG_EVERY"); e && *e) {
      char* end = nullptr;
      const long n = std::strtol(e, &end, 10);
      if (*end == '\0' && n >= 1 && n <= 1000000)
        every = static_cast<int>(n);
      else
        rt::log_line(st.setup.name, std::string("DILASERVE_DECISION_LOG_EVERY must be a whole number from 1 to "
                                                "1000000, got '") + e + "': logging one decision in " +
                                        std::to_string(every));
    }
    try {
      st.decisions_log = std::make_unique<decision_log>(dir, st.setup.name, every);
    } catch (const std::exception& e) {
      rt::log_line(st.setup.name, std::string("no decision log: ") + e.what());
    }
  }
  if (const char* dir = std::getenv("DILASERVE_STEP_LOG"); dir && *dir) {
    auto file = st.setup.name;
    std::replace(file.begin(), file.end(), '/', '_');
    try {
      st.step_log = std::make_unique<dls::step_log>(std::string(dir) + "/" + file + ".csv");
      st.step_now.run = st.setup.name;
    } catch (const std::exception& e) {
      rt::log_line(st.setup.name, std::string("no step log: ") + e.what());
    }
  }
  auto world = static_cast<int>(st.setup.workers.size());
  auto link = st.setup.device_set->link_for(std::vector<int>(st.setup.devices.begin(), st.setup.devices.end()));
  for (int r = 0; r < world; ++r)
    self->send(st.setup.workers[static_cast<std::size_t>(r)], configure_atom::value, shard_setup{r, world, link});
  if (st.profile) {
    if (st.setup.slo_book)
      if (auto known = st.setup.slo_book->find(static_cast<int>(st.setup.workers.size()))) {
        st.slo_overhead_s = *known;
        st.slo_overhead_fixed = true;
      }
    time_empty_steps(self, slo_overhead_rounds);
  }
  return {
      [=](rt::enqueue_atom, rt::work_item& item) {
        if (!sender_from(self, self->state.setup.head_node, "tp_group")) return;
        // The supervisor tells the request actor where it placed it; an item from this node
        // (a regroup moving its requests) the group announces itself.
        const bool tell_placement = sender_is_local(self);
        auto& st = self->state;
        const bool from_supervisor =
            self->current_sender() == caf::actor_cast<caf::strong_actor_ptr>(st.setup.supervisor);
        if (from_supervisor) ++st.enqueued;
        // A drained group is about to be replaced: the supervisor places the item again.
        if (st.drained) {
          self->send(st.setup.supervisor, rt::drain_atom::value, std::move(item));
          return;
        }
        const auto& cfg = st.setup.model->config;
        std::string bytes;
        std::string problem;
        canvas_progress progress;
        std::string kv_bytes;
        answer_text streamed(*st.setup.tokenizer);
        try {
          gpu::canvas c;
          if (item.canvas.empty()) {
            auto prompt = st.setup.tokenizer->encode(item.prompt);
            st.prompt_bytes += item.prompt.size();
            st.prompt_tokens += prompt.size();
            auto p = params_for(st.setup.defaults, item);
            if (static_cast<int64_t>(prompt.size()) + int64_t{p.gen_length} > int64_t{cfg.max_seq})
              throw std::invalid_argument("prompt (" + std::to_string(prompt.size()) + " tokens) plus gen_length " +
                                          std::to_string(p.gen_length) + " exceeds the model's " +
                                          std::to_string(cfg.max_seq));
            if (auto why = p.validate(); !why.empty()) throw std::invalid_argument(why);
            if (auto why = st.setup.device_set->cannot_decode(p); !why.empty()) throw std::invalid_argument(why);
            c = gpu::canvas::start(prompt, p, cfg.mask_id, cfg.eos_id);
          } else {
            c = gpu::canvas::from_bytes(std::string(item.canvas.begin(), item.canvas.end()));
            if (!item.kv_canvas.empty()) {
              auto source = gpu::canvas::from_bytes(std::string(item.kv_canvas.begin(), item.kv_canvas.end()));
              if (auto why = gpu::rebuild_problem(c, source); !why.empty()) throw std::invalid_argument(why);
              kv_bytes = source.to_bytes();
            } else if (!c.at_refresh_boundary()) {
              throw std::invalid_argument("canvas is not at a refresh boundary");
            }
            streamed = streamed_text_of(*st.setup.tokenizer, c);
          }
          bytes = c.to_bytes();
          progress = progress_of(c);
        } catch (const std::exception& e) {
          problem = e.what();
        }
        if (!problem.empty()) {
          self->send(item.request, rt::failed_atom::value, item.epoch, "rejected: " + problem);
          return;
        }
        // Mid-block with its KV cache sent to this process: it waits for the shards instead of
        // rebuilding, unless the cache was meant for another group.
        if (!kv_bytes.empty() && item.kv.transfer != 0) {
          const auto why = kv_claim_problem(st, item.kv);
          if (why.empty()) {
            if (tell_placement)
              self->send(item.request, rt::placed_atom::value, item.epoch, st.setup.node, st.setup.name);
            pending_kv p;
            p.rows = static_cast<int32_t>(gpu::canvas::from_bytes(bytes).length());
            p.item = std::move(item);
            p.canvas = std::move(bytes);
            p.kv_source = std::move(kv_bytes);
            p.progress = progress;
            p.text = std::move(streamed);
            await_kv(self, std::move(p));
            return;
          }
          rt::log_line(st.setup.name, "request " + std::to_string(item.request_id) +
                                          ": rebuilding its KV cache, not taking the one in flight: " + why);
        }
        // A first placement from the prompt may be refused under overload; a request that
        // already ran somewhere (resumed, re-placed or moved) is accepted work and never is.
        const bool first_placement = item.canvas.empty() && item.epoch == 0 && item.moved_from.empty();
        for (auto& w : st.setup.workers) {
          if (kv_bytes.empty())
            self->send(w, admit_atom::value, item.request_id, bytes);
          else
            self->send(w, admit_atom::value, item.request_id, bytes, kv_bytes);
        }
        if (tell_placement)
          self->send(item.request, rt::placed_atom::value, item.epoch, st.setup.node, st.setup.name);
        if (!item.moved_from.empty()) st.migrations_in += 1;
        auto& q = add_request(self, std::move(item), progress);
        q.arrived_how = kv_bytes.empty() ? "canvas" : "rebuild";
        if (first_placement) st.fresh.push_back(q.live.id);
        // Every request that joins is load on this group, placed, re-placed or moved in.
        st.load.record({now_s(st), q.live.progress.prompt_len, q.live.progress.gen_len,
                        q.live.deadline_s - q.live.arrival_s});
        q.text = std::move(streamed);
        q.streamed_blocks = progress.block;
        // The supervisor counted a request it sent here when it sent it; the next report (a
        // finish, or the notes of its first decision at most kind_report_interval_s later)
        // brings the rest. A group that sheds reports at once: the head refuses at placement by
        // its backlog.
        if (!from_supervisor || st.policy.refuse_overload) report_load(self);
        kick(self);
      },
      [=](step_atom) {
        if (sender_is_local(self, "tp_group") && !self->state.holding) run_step(self);
      },
      [=](report_atom) {
        if (!sender_is_local(self, "tp_group")) return;
        auto& st = self->state;
        st.report_due = false;
        if (!st.progress_out.empty()) report_load(self);
      },
      // A shard of a KV cache in flight landed (or failed), from the UCX progress thread.
      [=](kv_landed_atom, uint64_t id, uint32_t epoch, int32_t rank, const std::string& error,
          rt::ucx_payload& payload) {
        if (!sender_is_local(self, "tp_group")) return;
        on_kv_landed(self, id, epoch, static_cast<std::size_t>(rank), error, std::move(payload));
      },
      // A withdrawn request leaves the batch; a step in flight that still holds it is
      // ignored for it when it returns (it is no longer queued).
      [=](rt::cancel_atom, uint64_t id) {
        if (!sender_from(self, self->state.setup.head_node, "tp_group")) return;
        if (self->state.pending.erase(id)) return;  // shards landing later are dropped
        if (!self->state.queue.count(id)) return;
        remove(self, id, "was withdrawn");
        report_load(self);
        kick(self);
      },
      // This node's keeper of snapshots changed (the agent relays the head's choice).
      [=](rt::keeper_atom, const std::string& node, const std::string& address) {
        if (!sender_is_local(self, "tp_group")) return;
        self->state.setup.keeper_node = node;
        self->state.setup.keeper_address = address;
      },
      // The policy set changes between two steps; the next decision uses the new one.
      [=](rt::policy_atom, const std::string& name) {
        if (!sender_from(self, self->state.setup.head_node, "tp_group")) return;
        set_policy(self->state, name);
        self->state.dirty = true;
        report_load(self);
      },
      // An order to move a request (the supervisor, for `dilaserve migrate` or the planner).
      [=](rt::migrate_atom, rt::migration_order& o) {
        if (!sender_from(self, self->state.setup.head_node, "tp_group")) return;
        auto& st = self->state;
        auto it = st.queue.find(o.request_id);
        if (it == st.queue.end() || st.draining) {
          rt::log_line(st.setup.name, "migration of request " + std::to_string(o.request_id) + " to " + o.to +
                                          " dropped: " + why_not_queued(st, o.request_id));
          return;
        }
        it->second.leave = std::move(o);
        kick(self);
      },
      // A request handed over mid-block by a group of this process: its slots move in as
      // they are, rank by rank.
      [=](handover_atom, group_handover& h) -> caf::result<bool> {
        if (!sender_is_local(self, "tp_group")) return caf::make_error(caf::sec::runtime_error, std::string("not local"));
        auto& st = self->state;
        if (st.draining || st.drained || h.slots.size() != st.setup.workers.size())
          return caf::make_error(caf::sec::request_receiver_down);
        const auto id = h.meta.request_id;
        for (std::size_t r = 0; r < h.slots.size(); ++r) self->send(st.setup.workers[r], adopt_atom::value, id, h.slots[r]);
        self->send(h.meta.request, rt::placed_atom::value, h.meta.epoch, st.setup.node, st.setup.name);
        st.migrations_in += 1;
        auto& q = add_request(self, std::move(h.meta), h.progress);
        q.arrived_how = "handover";
        q.committed = h.committed;
        q.steps = h.steps;
        q.text = std::move(h.text);
        q.streamed_blocks = h.streamed_blocks;
        report_load(self);
        kick(self);
        return true;
      },
      // The migration planner's view of this group; building it counts as decision time.
      [=](rt::view_atom) -> caf::result<rt::group_report> {
        if (!sender_from(self, self->state.setup.head_node, "tp_group"))
          return caf::make_error(caf::sec::runtime_error, std::string("not from the head"));
        auto& st = self->state;
        const auto t0 = clock_type::now();
        const double cpu0 = thread_cpu_s();
        const double now = now_s(st);
        rt::group_report g;
        g.group = st.setup.name;
        g.node = st.setup.node;
        g.tp = st.view.tp;
        g.draining = st.draining;
        g.step_s = st.step_s;
        g.max_active = st.policy.max_active;
        double held = 0;
        for (auto id : st.order) {
          const auto& q = st.queue[id];
          if (q.leave) continue;  // already on its way out
          const auto& p = q.live.progress;
          g.requests.push_back({id, now - q.live.arrival_s, q.live.deadline_s - now, q.live.tau, q.live.tau_pinned,
                                q.live.tau_floor, p.prompt_len, p.gen_len, p.block_len, p.block, p.step_in_block,
                                p.masks_left, p.next_refresh, q.active});
          if (q.active) held += p.prompt_len + p.gen_len;
        }
        g.kv_free_tokens = std::max(0.0, st.view.kv_capacity_tokens - held);
        st.policy_seconds += std::chrono::duration<double>(clock_type::now() - t0).count();
        st.policy_cpu_seconds += thread_cpu_s() - cpu0;
        return g;
      },
      [=](rt::drain_atom) -> caf::result<caf::message> {
        if (!sender_is_local(self, "tp_group")) return caf::make_error(caf::sec::runtime_error, std::string("not local"));
        auto& st = self->state;
        st.drain_rp = self->make_response_promise();
        st.draining = true;
        if (!st.stepping) run_step(self);
        return st.drain_rp;
      },
  };
}

}  // namespace

caf::actor spawn_tp_group(caf::actor_system& sys, group_setup setup) { return sys.spawn(tp_group, std::move(setup)); }

}  // namespace dls::actors
