// The state of a TP group actor (tp_group.cpp) and the parts of its behaviour, one file per job:
// requests coming and going (tp_group_requests.cpp), the reports to the supervisor
// (tp_group_reports.cpp), the step loop (tp_group_step.cpp), draining for a regroup
// (tp_group_drain.cpp), migrations out and in (tp_group_migration.cpp) and KV caches over UCX
// (tp_group_kv.cpp). Only the TP group's files include it.
#pragma once

#include "actors/answer_text.hpp"
#include "actors/decision_record.hpp"
#include "actors/local_messages.hpp"
#include "actors/node_parts.hpp"
#include "actors/policy_view.hpp"
#include "common/step_log.hpp"
#include "policies/group_step.hpp"
#include "runtime/messages.hpp"
#include "runtime/step_histogram.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dls::actors::tp_group_impl {

namespace rt = dls::runtime;
using clock_type = std::chrono::steady_clock;

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

// How long a group waits for a worker's answer (a step, a release, an eviction) before it fails
// the work explicitly instead of stalling: generous, since a step of a large model takes seconds.
constexpr auto step_timeout = std::chrono::minutes(5);

// Empty round trips a starting group times for the overhead its SLOs count (the least is kept):
// enough that one of them sees the workers awake, each a fraction of a millisecond.
constexpr int slo_overhead_rounds = 5;

// tp_group_requests.cpp
void enqueue(group_ptr self, rt::work_item& item);
int64_t unix_now_us();
double thread_cpu_s();
double now_s(const group_state& st);
void note_end(group_state& st, uint64_t id, const char* how);
std::string why_not_queued(const group_state& st, uint64_t id);
void remove(group_ptr self, uint64_t id, const char* how);
queued_request& add_request(group_ptr self, rt::work_item item, const canvas_progress& progress);
rt::work_item meta_now(const group_state& st, const queued_request& q);

// tp_group_reports.cpp
rt::request_progress progress_now(const group_state& st, const queued_request& q, double now, double step_s);
void report_load(group_ptr self);
void tell_progress(group_ptr self, double now, double step_s, const std::vector<queued_request*>& which);

// tp_group_step.cpp
void run_step(group_ptr self);
void kick(group_ptr self);
void time_empty_steps(group_ptr self, int rounds);

// tp_group_drain.cpp
void finish_drain(group_ptr self);
void hand_back_at_boundaries(group_ptr self);

// tp_group_migration.cpp
void start_migrations(group_ptr self);
void join_queue(group_ptr self, pending_kv p, const char* how);
void note_downtime(group_state& st, queued_request& q);
uint64_t take_transfer_ids(group_state& st, std::size_t n);
std::string node_of_group(const std::string& group);
/// Whether the environment variable `var` names the node `group` runs on: the fault switches of
/// the runtime tests (DILASERVE_HOLD_AFTER_SNAPSHOT, DILASERVE_SNAPSHOT_FAULT,
/// DILASERVE_ANSWER_FAULT). Unset in production.
bool env_names_node_of(const char* var, const std::string& group);

// tp_group_kv.cpp
std::string send_kv(group_ptr self, const rt::migration_order& order, const std::vector<held_slot_ptr>& held,
                    const std::string& peer, const std::string& peer_error, rt::migration_handoff& h,
                    std::string& decided);
std::string kv_claim_problem(const group_state& st, const rt::kv_in_flight& kv);
void await_kv(group_ptr self, pending_kv p);
void on_kv_landed(group_ptr self, uint64_t id, uint32_t epoch, std::size_t rank, const std::string& error,
                  rt::ucx_payload payload);

}  // namespace dls::actors::tp_group_impl
