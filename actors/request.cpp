// One actor per request, living at the head so it survives any node. It owns the
// lifecycle, the deadline, the last canvas snapshot (taken at a refresh boundary) and
// the answer to the client; it streams finished blocks as they arrive.
#include "actors/head_messages.hpp"
#include "actors/peer_roles.hpp"
#include "actors/spawn.hpp"
#include "runtime/log.hpp"
#include "runtime/peer_snapshot.hpp"

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace dls::actors {

namespace rt = dls::runtime;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

struct request_state {
  uint64_t id = 0;
  rt::submit_spec spec;
  double threshold = 0;       // current τ (the group's controller moves it unless pinned)
  bool pinned = false;        // the client chose τ
  double min_threshold = 0;   // the client's floor
  double tau_low = 1.0;       // as its last group handed it over (work_item::tau_low)
  double deadline_ms = 0;     // after arrival: slo_ms, or the profiled default; 0 until known
  // Unlisted: the head's own probe (supervisor.cpp), in no directory row and no count of
  // the clients' requests.
  bool listed = true;
  double slack_ms = 0;
  std::string next_step;      // refresh | reuse, once a group decided
  int32_t gen_length = 0;
  caf::actor core;
  caf::actor supervisor;
  peer_registry_ptr peers;  // progress comes from TP groups on authenticated nodes
  rt::head_journal_ptr journal;  // snapshots and the end are logged here (may be null)
  clock_type::time_point arrival;
  int64_t arrival_unix_ms = 0;  // for observers in the head process (the dashboard's slack)
  uint32_t epoch = 0;
  std::vector<char> canvas;  // last snapshot; empty until the first refresh boundary
  int32_t canvas_steps = 0;  // the steps `canvas` had taken
  std::vector<char> kv_canvas;  // set while `canvas` is mid-block (a migration): its last refresh's canvas
  // With `ucx.snapshots: peer`: the node that keeps a newer snapshot than `canvas` (empty: none).
  std::string snapshot_at;
  // What the group that took it said of the snapshot snapshot_at keeps (over TLS): the placement
  // it was taken in, and the SHA-256 of its frame, which what the keeper hands back must match.
  uint32_t snapshot_epoch = 0;
  std::string snapshot_digest;
  std::string resumed_from;  // for the directory: where the last re-placement resumed from
  int32_t migrations = 0;
  json migration_log = json::array();  // the newest migrations_shown moves: from, to, how, why, step
  int32_t steps = 0;
  int32_t tokens = 0;
  int32_t streamed_blocks = 0;
  int32_t moves = 0;
  std::string status = "QUEUED";
  std::string node;
  std::string group;
  // Where cancels go, and the only process whose messages about this request count. Not
  // monitored: the supervisor watches each group once and re-places the requests of one that
  // ends, instead of every request watching its group.
  caf::actor group_handle;
  int32_t foreign_refused = 0;  // messages from a node it does not run on (logged once)
  bool done = false;
  rt::answer result;
  std::vector<caf::response_promise> waiting;
  static inline const char* name = "dls.request";
};

using req_ptr = caf::stateful_actor<request_state>*;

// Migrations listed per request in the directory; older ones still count in `migrations`.
constexpr std::size_t migrations_shown = 16;

double elapsed_ms(const request_state& st) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - st.arrival).count();
}

request_details details(const request_state& st) {
  request_details d;
  d.status = st.status;
  d.tau = st.threshold;
  d.tokens = st.tokens;
  d.gen_length = st.gen_length;
  d.steps = st.steps;
  d.node = st.node;
  d.group = st.group;
  d.moves = st.moves;
  d.migrations = st.migrations;
  if (!st.migration_log.empty()) d.migration_log = st.migration_log;
  d.slo_ms = st.spec.slo_ms;
  d.arrival_unix_ms = st.arrival_unix_ms;
  d.tau_pinned = st.pinned;
  d.min_tau = st.min_threshold;
  d.deadline_ms = st.deadline_ms;
  d.slack_ms = st.slack_ms;
  d.next_step = st.next_step;
  d.snapshot_at = st.snapshot_at;
  d.resumed_from = st.resumed_from;
  return d;
}

// The directory row is keyed by the request id: the first update creates it, so no answer is
// awaited and a request refused at once still leaves a row that is counted.
void publish(req_ptr self) {
  const auto& st = self->state;
  if (!st.listed) return;
  // RESTARTING while it waits to resume elsewhere after losing its node.
  auto state = st.done ? "DEAD" : st.status == "REPLACING" ? "RESTARTING" : "ALIVE";
  self->send(st.core, request_row_atom::value, st.id, std::string(state), details(st), st.done && st.result.ok);
}

rt::work_item make_item(const request_state& st, caf::actor self) {
  rt::work_item w;
  w.request_id = st.id;
  w.epoch = st.epoch;
  w.request = std::move(self);
  w.prompt = st.spec.prompt;
  w.threshold = st.threshold;
  w.threshold_pinned = st.pinned;
  w.min_threshold = st.min_threshold;
  w.tau_low = st.tau_low;
  w.reject_on_miss = st.spec.reject_on_miss;
  w.age_ms = elapsed_ms(st);
  w.deadline_ms = st.deadline_ms;
  w.gen_length = st.gen_length;
  w.canvas = st.canvas;
  w.kv_canvas = st.kv_canvas;
  w.stream = st.spec.stream;
  w.top_p = st.spec.top_p;
  w.top_k = st.spec.top_k;
  w.alg_temp = st.spec.alg_temp;
  w.schedule = st.spec.schedule;
  w.eps = st.spec.eps;
  w.rule = st.spec.rule;
  w.steps_per_block = st.spec.steps_per_block;
  return w;
}

// The peer that kept this request's snapshot may drop it (the request ended, or has a newer
// canvas elsewhere).
void forget_peer_snapshot(req_ptr self) {
  auto& st = self->state;
  if (st.snapshot_at.empty()) return;
  self->send(st.core, rt::forget_snap_atom::value, st.snapshot_at, st.id);
  st.snapshot_at.clear();
}

void finish(req_ptr self, rt::answer a) {
  auto& st = self->state;
  if (st.done) return;
  st.done = true;
  a.request_id = st.id;
  a.latency_ms = elapsed_ms(st);
  a.threshold = st.threshold;
  a.moves = st.moves;
  a.tag = st.spec.tag;
  a.deadline_ms = st.deadline_ms;
  // A failure (a refusal included) meets no SLO: attainment counts it as a miss.
  a.slo_met = a.ok && (st.deadline_ms <= 0 || a.latency_ms <= st.deadline_ms);
  st.status = a.ok ? "FINISHED" : "FAILED";
  st.result = a;
  // Logged before the client hears it: a restarted head then hands a re-attaching client this
  // answer instead of decoding the request again.
  if (st.journal) {
    try {
      st.journal->finished(st.id, a);
    } catch (const std::exception& e) {
      rt::log_line("request-" + std::to_string(st.id), std::string("cannot log its end: ") + e.what());
    }
  }
  for (auto& rp : st.waiting) rp.deliver(a);
  st.waiting.clear();
  st.group_handle = nullptr;
  forget_peer_snapshot(self);
  publish(self);
  self->send(st.supervisor, rt::finished_atom::value, st.id);
  self->quit();
}

// Resumes the request elsewhere from its last snapshot. Messages the old group may
// still send carry the old epoch and are ignored. The supervisor orders this once per
// placement it forgets, named by its epoch, so the epoch alone makes it idempotent: a request
// still REPLACING (or MIGRATING) whose awaited placement went to a group that died must go
// again, or nobody places it.
void enqueue_again(req_ptr self, const std::string& why, const std::string& source) {
  auto& st = self->state;
  st.resumed_from = st.canvas.empty() ? std::string("the prompt") : "step " + std::to_string(st.canvas_steps) + source;
  rt::log_line("request-" + std::to_string(st.id),
               why + "; re-placing from " +
                   (st.canvas.empty() ? std::string("the prompt (no snapshot yet)")
                                      : "a canvas at step " + std::to_string(st.canvas_steps) + source));
  publish(self);
  self->send(st.supervisor, rt::enqueue_atom::value, make_item(self->state, caf::actor_cast<caf::actor>(self)));
}

// How long a re-placement waits for the peer that keeps its snapshot: the head's look-up of a
// UCX address waits as long; a keeper that does not answer by then is treated as lost.
constexpr auto peer_fetch_timeout = std::chrono::seconds(10);

void replace(req_ptr self, const std::string& why) {
  auto& st = self->state;
  if (st.done) return;
  ++st.epoch;
  ++st.moves;
  st.status = "REPLACING";
  st.group.clear();
  st.group_handle = nullptr;
  if (st.snapshot_at.empty()) {
    enqueue_again(self, why, "");
    return;
  }
  publish(self);
  const auto epoch = st.epoch;
  const auto keeper = st.snapshot_at;
  self->request(st.core, peer_fetch_timeout, rt::fetch_snap_atom::value, keeper, st.id)
      .then(
          [=](std::vector<char>& canvas, int32_t steps, int32_t tokens) {
            auto& st = self->state;
            if (st.done || st.epoch != epoch) return;  // another re-placement fetches for itself
            const rt::peer_snapshot got{st.id, st.snapshot_epoch, steps, tokens, canvas};
            if (rt::peer_snapshot_digest(got) != st.snapshot_digest) {
              // Replaced on the way, filed by another UCX peer, or a newer one whose note never
              // came: not what its group said it sent, so not resumed from.
              rt::log_line("request-" + std::to_string(st.id), "refuses the snapshot node '" + keeper +
                                                                   "' kept: it does not match the digest its group sent");
              st.snapshot_at.clear();
              enqueue_again(self, why + " (the snapshot node '" + keeper + "' kept does not match its digest)", "");
              return;
            }
            st.canvas = std::move(canvas);
            st.canvas_steps = steps;
            st.kv_canvas.clear();
            st.steps = steps;
            st.tokens = tokens;
            enqueue_again(self, why, " kept by node '" + keeper + "'");
          },
          [=](caf::error& e) {
            auto& st = self->state;
            if (st.done || st.epoch != epoch) return;
            // Lost with its keeper, or never arrived: the older canvas the head holds, if any.
            st.snapshot_at.clear();
            enqueue_again(self, why + " (the snapshot node '" + keeper + "' kept is lost: " + to_string(e) + ")", "");
          });
}

void take_placement(request_state& st, const std::string& node, const std::string& group, caf::actor handle) {
  if (!st.group.empty() && st.group != group) ++st.moves;
  st.node = node;
  st.group = group;
  st.group_handle = std::move(handle);
  st.status = "RUNNING";
}

void take_progress(request_state& st, const rt::request_progress& p) {
  if (p.next_kind.empty()) return;  // no decision on it yet
  st.threshold = p.tau;
  st.slack_ms = p.slack_ms;
  st.deadline_ms = p.deadline_ms;
  st.next_step = p.next_kind;
}

// The supervisor (await, replace) is local; placements, snapshots, blocks and answers come from
// the TP group the request runs on, on a node that joined with a node credential: the process
// of the group it was placed on (the supervisor names it before the group gets the request; a
// hand-over within that process keeps it), so that no other node can speak for it.
bool from_group(req_ptr self) {
  if (sender_is_local(self)) return true;
  auto& st = self->state;
  if (!st.peers || !sender_may(self, *st.peers, role_node, "request")) return false;
  const auto& sender = self->current_sender();
  if (st.group_handle && sender && sender->node() == st.group_handle.node()) return true;
  if (st.foreign_refused++ == 0)
    rt::log_line("request-" + std::to_string(st.id),
                 "refused a message from a node it does not run on (" +
                     (sender ? to_string(sender->node()) : std::string("no sender")) + "; placed on " +
                     (st.node.empty() ? std::string("none yet") : "node '" + st.node + "'") + ")");
  return false;
}

bool from_head(req_ptr self) { return sender_is_local(self, "request"); }

// A request's state at arrival (or, for one a restarted head found in its log, at recovery).
std::shared_ptr<request_state> initial_state(uint64_t id, rt::submit_spec spec, const rt::engine_defaults& defaults,
                                             caf::actor core, caf::actor supervisor, peer_registry_ptr peers,
                                             rt::head_journal_ptr journal, const rt::journal_request* recovered) {
  auto out = std::make_shared<request_state>();
  auto& st = *out;
  st.id = id;
  st.peers = std::move(peers);
  st.journal = std::move(journal);
  st.arrival = clock_type::now();
  const auto unix_now =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  st.arrival_unix_ms = unix_now;
  if (recovered) {
    // Its age (and so its deadline) counts the time the head was down: the wall clock is the
    // only one two head processes share.
    st.arrival_unix_ms = recovered->arrival_unix_ms;
    st.arrival -= std::chrono::milliseconds(std::max<int64_t>(0, unix_now - recovered->arrival_unix_ms));
    st.canvas = recovered->canvas;
    st.canvas_steps = recovered->steps;
    st.steps = recovered->steps;
    st.tokens = recovered->tokens;
    st.moves = 1;
    st.status = "REPLACING";
  }
  st.pinned = spec.threshold >= 0;
  st.threshold = st.pinned ? spec.threshold : defaults.decode.threshold;
  st.min_threshold = spec.min_threshold > 0 ? spec.min_threshold : 0.0;
  if (!st.pinned) st.threshold = std::max(st.threshold, st.min_threshold);
  st.deadline_ms = spec.slo_ms > 0 ? static_cast<double>(spec.slo_ms) : 0.0;
  st.gen_length = spec.gen_length > 0 ? spec.gen_length : defaults.decode.gen_length;
  st.spec = std::move(spec);
  st.core = std::move(core);
  st.supervisor = std::move(supervisor);
  return out;
}

// The supervisor places the first work item itself (started_request::first_item), so the
// request actor only announces its row.
caf::behavior request(req_ptr self, std::shared_ptr<const request_state> initial) {
  self->state = *initial;
  // A handler that throws must not end the actor silently: its client would wait forever, and
  // an await still in its mailbox would come back as request_receiver_down.
  self->set_exception_handler([=](std::exception_ptr& eptr) -> caf::error {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    rt::log_line("request-" + std::to_string(self->state.id), "fatal: " + what);
    rt::answer a;
    a.error = "the head failed on this request: " + what;
    finish(self, std::move(a));
    return caf::make_error(caf::sec::runtime_error, what);
  });
  publish(self);
  return {
      [=](rt::await_atom) -> caf::result<caf::message> {
        if (!from_head(self)) return caf::make_error(caf::sec::runtime_error, std::string("not authenticated"));
        auto rp = self->make_response_promise();
        if (self->state.done)
          rp.deliver(self->state.result);
        else
          self->state.waiting.push_back(rp);
        return rp;
      },
      // Where placement `epoch` sent it: from the supervisor, which placed it there (so the head
      // gets no message from the group for it) ...
      [=](rt::placed_atom, uint32_t epoch, const std::string& node, const std::string& group,
          const caf::actor& handle) {
        if (!from_head(self)) return;
        auto& st = self->state;
        if (epoch != st.epoch || st.done) return;
        take_placement(st, node, group, handle);
        publish(self);
      },
      // ... or from a group it was handed over to within a node, which the supervisor learns
      // from here.
      [=](rt::placed_atom, uint32_t epoch, const std::string& node, const std::string& group) {
        if (!from_group(self)) return;
        auto& st = self->state;
        if (epoch != st.epoch || st.done) return;
        take_placement(st, node, group, caf::actor_cast<caf::actor>(self->current_sender()));
        self->send(st.supervisor, rt::placed_atom::value, st.id, group);
        publish(self);
      },
      [=](rt::snapshot_atom, uint32_t epoch, std::vector<char>& canvas, int32_t steps, int32_t tokens) {
        if (!from_group(self)) return;
        auto& st = self->state;
        if (epoch != st.epoch || st.done) return;
        forget_peer_snapshot(self);  // this one is newer
        st.canvas = std::move(canvas);
        st.canvas_steps = steps;
        st.kv_canvas.clear();
        st.steps = steps;
        st.tokens = tokens;
        if (st.journal) {
          try {
            st.journal->snapshot(st.id, st.canvas, steps, tokens);
          } catch (const std::exception& e) {
            rt::log_line("request-" + std::to_string(st.id), std::string("cannot log its snapshot: ") + e.what());
          }
        }
        publish(self);
      },
      // The same, kept by a peer node (`ucx.snapshots: peer`): only where it is comes here.
      [=](rt::snapshot_atom, uint32_t epoch, const std::string& keeper, int32_t steps, int32_t tokens,
          const std::string& digest) {
        if (!from_group(self)) return;
        auto& st = self->state;
        if (epoch != st.epoch || st.done) return;
        if (st.snapshot_at != keeper) forget_peer_snapshot(self);
        st.snapshot_at = keeper;
        st.snapshot_epoch = epoch;
        st.snapshot_digest = digest;
        st.steps = steps;
        st.tokens = tokens;
        publish(self);
      },
      // The group it ran on let it go at a step boundary to migrate. A hand-over within one
      // process needs nothing more (the destination tells us where it runs); otherwise it
      // resumes on the destination from the canvas, like a re-placement but to that group
      // (with the ids of its KV cache on the way, when the source sent it over UCX).
      [=](rt::migrate_atom, uint32_t epoch, rt::migration_handoff& h) {
        if (!from_group(self)) return;
        auto& st = self->state;
        if (epoch != st.epoch || st.done) return;
        st.migrations += 1;
        st.migration_log.push_back({{"from", h.from}, {"to", h.to}, {"how", h.how}, {"reason", h.reason},
                                    {"step", h.step}});
        if (st.migration_log.size() > migrations_shown) st.migration_log.erase(st.migration_log.begin());
        rt::log_line("request-" + std::to_string(st.id), "migrates " + h.from + " -> " + h.to + " (" + h.how +
                                                             ", " + h.reason + ") at step " + std::to_string(h.step));
        if (h.how == "handover") {
          publish(self);
          return;
        }
        st.canvas = std::move(h.canvas);
        st.canvas_steps = h.step;
        st.kv_canvas = std::move(h.kv_canvas);
        st.tau_low = h.tau_low;
        forget_peer_snapshot(self);  // the hand-off's canvas is newer
        ++st.epoch;
        ++st.moves;
        st.status = "MIGRATING";
        st.group.clear();
        st.group_handle = nullptr;
        publish(self);
        auto item = make_item(self->state, caf::actor_cast<caf::actor>(self));
        item.moved_from = h.from;
        // Only this placement may claim the KV cache in flight; a later re-placement rebuilds.
        item.kv = h.kv;
        item.moved_at_us = h.stopped_at_us;
        self->send(st.supervisor, rt::enqueue_atom::value, std::move(item), h.to);
      },
      // The group's policy state for this request when its tau or next step kind changed: the
      // supervisor hands it on from the group's load report.
      [=](rt::progress_atom, uint32_t epoch, const rt::request_progress& p) {
        if (!from_head(self)) return;
        auto& st = self->state;
        if (epoch != st.epoch || st.done) return;
        take_progress(st, p);
        publish(self);
      },
      [=](rt::block_atom, uint32_t epoch, rt::block_chunk& chunk) {
        if (!from_group(self)) return;
        auto& st = self->state;
        if (epoch != st.epoch || st.done) return;
        // After a re-placement, blocks that were already streamed come again; skip them.
        if (chunk.block < st.streamed_blocks) return;
        st.streamed_blocks = chunk.block + 1;
        chunk.request_id = st.id;
        chunk.tag = st.spec.tag;
        if (st.spec.stream && st.spec.client) self->send(st.spec.client, chunk);
      },
      [=](rt::finished_atom, uint32_t epoch, rt::run_result& r) {
        if (!from_group(self)) return;
        auto& st = self->state;
        if (epoch != st.epoch) return;
        take_progress(st, r.progress);
        st.steps = r.steps;
        st.tokens = r.tokens;
        st.node = r.node;
        st.group = r.group;
        rt::answer a;
        a.ok = true;
        a.text = std::move(r.text);
        a.steps = r.steps;
        a.tokens = r.tokens;
        a.node = r.node;
        a.group = r.group;
        a.group_ms = r.group_ms;
        finish(self, std::move(a));
      },
      // A client re-attached with this request's key (after a head restart, or a new
      // connection): blocks stream to it from now on.
      [=](rt::attach_atom, const caf::actor& client) {
        if (!from_head(self)) return;
        self->state.spec.client = client;
      },
      [=](rt::cancel_atom) {
        if (!from_head(self)) return;  // the supervisor, on behalf of the request's client
        auto& st = self->state;
        if (st.done) return;
        if (st.group_handle) self->send(st.group_handle, rt::cancel_atom::value, st.id);
        rt::answer a;
        a.error = "cancelled by the client";
        a.node = st.node;
        a.group = st.group;
        finish(self, std::move(a));
      },
      [=](rt::failed_atom, uint32_t epoch, const std::string& error) {
        if (!from_group(self)) return;
        if (epoch != self->state.epoch) return;
        rt::answer a;
        a.error = error;
        a.node = self->state.node;
        a.group = self->state.group;
        finish(self, std::move(a));
      },
      // The group of placement `epoch` ended otherwise than by a regroup (the supervisor
      // watches the groups), or its node died; the group may be one whose admission of it was
      // still in flight. Resume elsewhere from the last snapshot. An older epoch is a placement
      // it already left.
      [=](rt::replace_atom, uint32_t epoch, const std::string& why) {
        if (!from_head(self)) return;
        if (epoch != self->state.epoch) return;
        replace(self, why);
      },
      [=](rt::replace_atom, const std::string& node, uint32_t epoch) {
        if (!from_head(self)) return;
        const auto& st = self->state;
        if (epoch != st.epoch) return;
        replace(self, "node '" + node + "' died");
      },
  };
}

}  // namespace

started_request spawn_request(caf::actor_system& sys, uint64_t id, rt::submit_spec spec, rt::engine_defaults defaults,
                              caf::actor core, caf::actor supervisor, peer_registry_ptr peers,
                              rt::head_journal_ptr journal, const rt::journal_request* recovered, bool listed) {
  auto initial = initial_state(id, std::move(spec), defaults, std::move(core), std::move(supervisor), std::move(peers),
                               std::move(journal), recovered);
  initial->listed = listed;
  started_request out;
  out.actor = sys.spawn(request, std::shared_ptr<const request_state>(initial));
  out.first_item = make_item(*initial, out.actor);
  return out;
}

}  // namespace dls::actors
