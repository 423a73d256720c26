#pragma once
// The public face of a DiLaServe cluster for CAF programs: message types, atoms and
// the typed handles of the two published endpoints (docs/embedding.md).
//
// Every process of a cluster, and every embedding program, must call
// add_message_types(cfg) so that all nodes agree on the type names on the wire.
#include "runtime/cluster_config.hpp"
#include "runtime/request_progress.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/none.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace dls::runtime {

// -- atoms (at most 10 characters; names chosen not to collide with caf::*_atom) ------

using node_join_atom = caf::atom_constant<caf::atom("node_join")>;
using client_atom = caf::atom_constant<caf::atom("client")>;
using beat_atom = caf::atom_constant<caf::atom("beat")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using actors_atom = caf::atom_constant<caf::atom("actors")>;
using submit_atom = caf::atom_constant<caf::atom("submit")>;
using regroup_atom = caf::atom_constant<caf::atom("regroup")>;
using provision_atom = caf::atom_constant<caf::atom("provision")>;
using shutdown_atom = caf::atom_constant<caf::atom("shutdown")>;
using await_atom = caf::atom_constant<caf::atom("await")>;
using register_atom = caf::atom_constant<caf::atom("register")>;
using placed_atom = caf::atom_constant<caf::atom("placed")>;
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;
using block_atom = caf::atom_constant<caf::atom("block")>;
using finished_atom = caf::atom_constant<caf::atom("finished")>;
using failed_atom = caf::atom_constant<caf::atom("failed")>;
using load_atom = caf::atom_constant<caf::atom("load")>;
using enqueue_atom = caf::atom_constant<caf::atom("enqueue")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using node_dead_atom = caf::atom_constant<caf::atom("node_dead")>;
using groups_atom = caf::atom_constant<caf::atom("groups")>;
using replace_atom = caf::atom_constant<caf::atom("replace")>;
using detail_atom = caf::atom_constant<caf::atom("detail")>;
using check_atom = caf::atom_constant<caf::atom("check")>;
using bench_atom = caf::atom_constant<caf::atom("bench")>;
using policy_atom = caf::atom_constant<caf::atom("policy")>;
using progress_atom = caf::atom_constant<caf::atom("progress")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using attach_atom = caf::atom_constant<caf::atom("attach")>;
using migrate_atom = caf::atom_constant<caf::atom("migrate")>;
using view_atom = caf::atom_constant<caf::atom("view")>;
using ucx_atom = caf::atom_constant<caf::atom("ucx")>;  // a node's UCX worker address: register, look up
// Peer-kept recovery snapshots: the head tells a node its keeper (node, UCX address); the head
// fetches a request's snapshot from its keeper, and tells the keeper when it may forget it.
using keeper_atom = caf::atom_constant<caf::atom("keeper")>;
using fetch_snap_atom = caf::atom_constant<caf::atom("fetchsnap")>;
using forget_snap_atom = caf::atom_constant<caf::atom("forgetsnap")>;
// Data-plane wireup at join (runtime/ucx_wireup.hpp): the head gives a node that registered its
// UCX address each live peer's (node, address); the node reports back each peer it wired.
using wireup_atom = caf::atom_constant<caf::atom("wireup")>;
// The head's core asks its supervisor, once every node has joined, for the path overhead per
// request that deadlines count (scheduler_settings::slo_request_overhead_ms).
using calibrate_atom = caf::atom_constant<caf::atom("calibrate")>;

// -- configuration on the wire ---------------------------------------------------------

}  // namespace dls::runtime

// The shared types travel in the join reply; their inspectors live in their own namespaces,
// where CAF's lookup finds them.
namespace dls::common {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, decode_settings& x) {
  return f(caf::meta::type_name("dls_decode_settings"), x.gen_length, x.block_length, x.rule, x.threshold,
           x.steps_per_block, x.factor, x.cache, x.refresh_interval, x.temperature, x.seed, x.top_p, x.top_k,
           x.alg_temp, x.schedule, x.eps);
}

}  // namespace dls::common

namespace dls::config {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, device_spec& x) {
  return f(caf::meta::type_name("dls_device_spec"), x.kind, x.count, x.ids);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_config& x) {
  return f(caf::meta::type_name("dls_node_config"), x.name, x.host, x.port, x.devices, x.groups);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_defaults& x) {
  return f(caf::meta::type_name("dls_engine_defaults"), x.decode, x.max_batch);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scheduler_settings& x) {
  return f(caf::meta::type_name("dls_scheduler_settings"), x.policy, x.slo_scale, x.token_budget, x.max_active,
           x.tau_min, x.tau_step, x.accuracy_budget, x.cap_forecast_ms, x.cap_forecast_refresh_ms, x.refuse_overload, x.reject_on_miss, x.profile_path, x.profile_text, x.quality_path, x.quality_text);
}

}  // namespace dls::config

namespace dls::runtime {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ucx_config& x) {
  return f(caf::meta::type_name("dls_ucx_config"), x.tls, x.net_devices, x.rndv_threshold_bytes, x.part_bytes,
           x.tcp_segment_bytes, x.timeout_ms, x.kv_move, x.snapshots, x.encrypt);
}

// -- membership ------------------------------------------------------------------------

/// A node asking to join; `agent` is only used by the head after the token matched.
struct node_hello {
  std::string token;
  std::string node;
  std::string host;
  int32_t pid = 0;
  uint16_t port = 0;  // where the node published its agent
  caf::actor agent;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_hello& x) {
  return f(caf::meta::type_name("dls_node_hello"), x.token, x.node, x.host, x.pid, x.port, x.agent);
}

/// The head's answer to a join: either an error, or everything the node needs.
struct join_reply {
  bool ok = false;
  std::string error;
  std::string cluster;
  node_config node;
  engine_defaults engine;
  std::string model_path;
  int32_t heartbeat_interval_ms = 500;
  caf::actor head;
  caf::actor supervisor;  // groups report their queued work here
  uint32_t incarnation = 1;  // how many times this node name has joined (names stay unique)
  scheduler_settings scheduler;  // the policy at join time, with the profile and quality text
  int32_t head_grace_ms = 0;     // how long the node waits for a lost head to come back (0: exit at once)
  ucx_config ucx;                // the data plane every node starts
  std::string data_key;          // the cluster's data-plane key (ucx.encrypt); travels only over TLS
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_reply& x) {
  return f(caf::meta::type_name("dls_join_reply"), x.ok, x.error, x.cluster, x.node, x.engine,
           x.model_path, x.heartbeat_interval_ms, x.head, x.supervisor, x.incarnation, x.scheduler,
           x.head_grace_ms, x.ucx, x.data_key);
}

// -- directory -------------------------------------------------------------------------

/// One row of the actor directory (like `ray list actors`).
struct actor_info {
  uint64_t id = 0;
  std::string kind;   // request | worker | tp_group | supervisor | reconfigurer | node | head
  std::string name;
  std::string node;
  int32_t pid = 0;
  std::string state;  // ALIVE | DEAD | RESTARTING
  uint32_t restarts = 0;
  std::string details;  // a JSON object with per-kind fields
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, actor_info& x) {
  return f(caf::meta::type_name("dls_actor_info"), x.id, x.kind, x.name, x.node, x.pid, x.state,
           x.restarts, x.details);
}

/// A TP group as the supervisor sees it.
struct group_info {
  uint64_t id = 0;
  std::string name;
  std::string node;
  int32_t degree = 1;
  std::vector<int32_t> devices;
  caf::actor handle;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, group_info& x) {
  return f(caf::meta::type_name("dls_group_info"), x.id, x.name, x.node, x.degree, x.devices,
           x.handle);
}

// -- requests --------------------------------------------------------------------------

/// What a client submits. Zero or negative fields mean "cluster default".
struct submit_spec {
  std::string prompt;
  double threshold = -1;      // τ >= 0: pinned for the request's lifetime (the controller never changes it)
  double min_threshold = -1;  // >= 0: the controller never sets τ below it
  int32_t slo_ms = 0;
  int32_t gen_length = 0;
  bool stream = false;
  caf::actor client;  // receives block_chunk messages when stream is set
  uint64_t tag = 0;   // echoed in the answer, so a client can match many answers
  // The client's name for this request, unique to it (empty: none). Submitting a key the head
  // knows re-attaches to that request (or gets its answer) instead of starting another: how a
  // client carries on across a head restart.
  std::string key;
  bool reject_on_miss = false;  // a strict SLO: refuse at once rather than answer late (on_miss: reject)
  // Dream's sampler options for this request (decode_settings::top_p, top_k, alg_temp); a
  // negative value means the cluster's engine.* setting (0 is a setting for the last two: off).
  double top_p = -1;
  int32_t top_k = -1;
  double alg_temp = -1;
  // decode_settings::schedule as its enum value (0 even, 1 dream_linear); negative: the cluster's.
  int32_t schedule = -1;
  double eps = -1;  // decode_settings::eps; negative: the cluster's engine.eps
  // The commit rule as its enum value (common::commit_rule) and decode_settings::steps_per_block
  // (0: the block length); negative: the cluster's engine.commit and engine.steps_per_block.
  int32_t rule = -1;
  int32_t steps_per_block = -1;
};

// CAF 0.17 writes a double through pack754, which turns NaN into -1.0 (here: "the cluster's
// default") and never returns on an infinity. The client-chosen doubles therefore travel as
// their IEEE 754 bits, so the head receives exactly what was sent and can refuse it.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, submit_spec& x) {
  uint64_t threshold_bits = 0;
  uint64_t min_threshold_bits = 0;
  uint64_t top_p_bits = 0;
  uint64_t alg_temp_bits = 0;
  uint64_t eps_bits = 0;
  std::memcpy(&threshold_bits, &x.threshold, sizeof threshold_bits);
  std::memcpy(&min_threshold_bits, &x.min_threshold, sizeof min_threshold_bits);
  std::memcpy(&top_p_bits, &x.top_p, sizeof top_p_bits);
  std::memcpy(&alg_temp_bits, &x.alg_temp, sizeof alg_temp_bits);
  std::memcpy(&eps_bits, &x.eps, sizeof eps_bits);
  auto load = [&]() -> caf::error {
    std::memcpy(&x.threshold, &threshold_bits, sizeof x.threshold);
    std::memcpy(&x.min_threshold, &min_threshold_bits, sizeof x.min_threshold);
    std::memcpy(&x.top_p, &top_p_bits, sizeof x.top_p);
    std::memcpy(&x.alg_temp, &alg_temp_bits, sizeof x.alg_temp);
    std::memcpy(&x.eps, &eps_bits, sizeof x.eps);
    return caf::none;
  };
  return f(caf::meta::type_name("dls_submit_spec"), x.prompt, threshold_bits, x.slo_ms, x.gen_length, x.stream,
           x.client, x.tag, min_threshold_bits, x.key, x.reject_on_miss, top_p_bits, x.top_k, alg_temp_bits,
           x.schedule, eps_bits, x.rule, x.steps_per_block, caf::meta::load_callback(load));
}

/// A finished block of an answer, streamed to the client as soon as it is final.
struct block_chunk {
  uint64_t request_id = 0;
  uint64_t tag = 0;
  int32_t block = 0;
  std::string text;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, block_chunk& x) {
  return f(caf::meta::type_name("dls_block_chunk"), x.request_id, x.tag, x.block, x.text);
}

/// The end of every accepted request: an answer, or an explicit error.
/// How an answer's error starts when a TP group refused the request because it cannot finish
/// it by its deadline even at the lowest tau (load shedding, policies/overload.hpp); the HTTP
/// gateway answers such a request 429.
inline constexpr const char* overloaded_error = "overloaded: ";
/// How an answer's error starts when a TP group refused a request with a strict SLO
/// (scheduler.on_miss: reject) because it cannot meet its deadline (policy::refuse_if_late).
inline constexpr const char* deadline_refused_error = "refused (on_miss: reject): ";

struct answer {
  uint64_t request_id = 0;
  bool ok = false;
  std::string error;
  std::string text;
  double latency_ms = 0;
  int32_t steps = 0;
  int32_t tokens = 0;
  double threshold = 0;
  bool slo_met = true;
  std::string node;   // where it finished
  std::string group;
  int32_t moves = 0;  // migrations and re-placements it went through
  uint64_t tag = 0;
  double deadline_ms = 0;  // the SLO it was held to, after arrival (0: none)
  double group_ms = 0;     // of latency_ms, the time on the group it finished on
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, answer& x) {
  return f(caf::meta::type_name("dls_answer"), x.request_id, x.ok, x.error, x.text, x.latency_ms,
           x.steps, x.tokens, x.threshold, x.slo_met, x.node, x.group, x.moves, x.tag, x.deadline_ms, x.group_ms);
}

/// A request on its way to a group: fresh (empty canvas) or resumed from a canvas
/// taken at a refresh boundary. `epoch` lets the request actor drop late messages
/// from a group it has since left.
/// A KV cache on its way over the data plane (runtime/ucx_transport.hpp): where and under which
/// transfer ids. Empty (transfer 0) when nothing was sent.
struct kv_in_flight {
  uint64_t transfer = 0;  // the first id; rank r's shard travels as transfer + r
  int32_t shards = 0;     // the destination's TP degree
  std::string node;       // the destination node whose process receives it
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_in_flight& x) {
  return f(caf::meta::type_name("dls_kv_in_flight"), x.transfer, x.shards, x.node);
}

struct work_item {
  uint64_t request_id = 0;
  uint32_t epoch = 0;
  caf::actor request;
  std::string prompt;
  double threshold = 0;
  int32_t gen_length = 0;
  std::vector<char> canvas;
  bool threshold_pinned = false;  // the client chose τ: no controller changes it
  double min_threshold = 0;       // the controller's floor for this request's τ
  double age_ms = 0;              // since arrival, when sent (clocks of two hosts never mix)
  double deadline_ms = 0;         // after arrival; 0: the group derives it from the profile
  /// Set when `canvas` is mid-block (a migration without its KV cache): the canvas its last
  /// refresh ran on, from which the destination rebuilds the cache exactly.
  std::vector<char> kv_canvas;
  std::string moved_from;         // the group it migrates from; empty for any other placement
  bool stream = false;            // the client reads the answer block by block
  bool reject_on_miss = false;    // the client's strict SLO (submit_spec::reject_on_miss)
  /// Set when the source sent the KV cache over UCX: the process of node kv.node holds (or
  /// will hold) it as transfers kv.transfer + r, one per destination rank r < kv.shards. A
  /// group elsewhere, or one whose import fails, rebuilds from `kv_canvas` instead.
  kv_in_flight kv;
  /// When its source group stopped it for this migration (system clock, µs since the epoch):
  /// the destination measures the move's downtime to its first step there. 0: not migrating.
  int64_t moved_at_us = 0;
  // The client's sampler options (submit_spec's; negative: the group's engine defaults). A
  // resumed item's canvas carries its own, which these never override.
  double top_p = -1;
  int32_t top_k = -1;
  double alg_temp = -1;
  int32_t schedule = -1;
  double eps = -1;
  int32_t rule = -1;             // the client's commit rule (submit_spec::rule)
  int32_t steps_per_block = -1;  // and its steps per block (submit_spec::steps_per_block)
  /// The lowest tau it committed at so far (1: none yet, or not known after a re-placement from
  /// a snapshot). The accuracy budget charged it there already; a group it moves to goes on
  /// from that charge instead of charging it again, and never raises it above it.
  double tau_low = 1.0;
  /// The head's measured path overhead per request (ms, cluster_schema.hpp): a group deriving
  /// the deadline adds slo_scale x this to the profiled solo latency.
  double slo_request_overhead_ms = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, work_item& x) {
  return f(caf::meta::type_name("dls_work_item"), x.request_id, x.epoch, x.request, x.prompt,
           x.threshold, x.gen_length, x.canvas, x.threshold_pinned, x.min_threshold, x.age_ms, x.deadline_ms,
           x.kv_canvas, x.moved_from, x.stream, x.reject_on_miss, x.kv, x.moved_at_us, x.top_p, x.top_k,
           x.alg_temp, x.schedule, x.eps, x.rule, x.steps_per_block, x.tau_low, x.slo_request_overhead_ms);
}

using common::with_request;

// -- migration -------------------------------------------------------------------------

/// Move one request to another TP group at a step boundary of its group: `at` is "any" (the
/// next one), "boundary" (the next one before a refresh: only the canvas moves) or
/// "mid-block" (the next one before a reuse step: the KV cache moves or is rebuilt).
struct migration_order {
  uint64_t request_id = 0;
  std::string to;          // destination group name
  caf::actor to_handle;
  int32_t to_degree = 1;
  std::string at = "any";
  std::string reason;      // "admin" or the policy that decided it
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, migration_order& x) {
  return f(caf::meta::type_name("dls_migration_order"), x.request_id, x.to, x.to_handle, x.to_degree, x.at,
           x.reason);
}

/// What a group hands its request actor when the request leaves it: the canvas, and for a
/// move mid-block across processes the canvas of its last refresh (the destination rebuilds
/// the KV cache from it). `how`: canvas (at a refresh boundary), rebuild, transfer (mid-block,
/// the KV cache sent over UCX to the destination's process) or handover (within one process:
/// the KV cache moved by ownership, nothing to re-place).
struct migration_handoff {
  std::string from;
  std::string to;
  std::string how;
  std::string reason;
  int32_t step = 0;
  std::vector<char> canvas;
  std::vector<char> kv_canvas;
  kv_in_flight kv;  // how "transfer": the KV cache travels over UCX (kv_canvas stays the fallback)
  int64_t stopped_at_us = 0;  // see work_item::moved_at_us
  double tau_low = 1.0;       // see work_item::tau_low
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, migration_handoff& x) {
  return f(caf::meta::type_name("dls_migration_handoff"), x.from, x.to, x.how, x.reason, x.step, x.canvas,
           x.kv_canvas, x.kv, x.stopped_at_us, x.tau_low);
}

/// One request as a group reports it to the migration planner, in seconds relative to the
/// group's now (clocks of two hosts never mix).
struct request_report {
  uint64_t id = 0;
  double age_s = 0;
  double to_deadline_s = 0;
  double tau = 0.9;
  bool tau_pinned = false;
  double tau_floor = 0;
  int32_t prompt_len = 0;
  int32_t gen_len = 0;
  int32_t block_len = 0;
  int32_t block = 0;
  int32_t step_in_block = 0;
  int32_t masks_left = 0;
  bool next_refresh = true;
  bool active = false;     // admitted (in the step candidates), else still queued there
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_report& x) {
  return f(caf::meta::type_name("dls_request_report"), x.id, x.age_s, x.to_deadline_s, x.tau, x.tau_pinned,
           x.tau_floor, x.prompt_len, x.gen_len, x.block_len, x.block, x.step_in_block, x.masks_left,
           x.next_refresh, x.active);
}

/// A group's state for the migration planner.
struct group_report {
  std::string group;
  std::string node;
  int32_t tp = 1;
  bool draining = false;
  double step_s = 0;           // the expected step time of its last decision
  double kv_free_tokens = 0;
  int32_t max_active = 0;
  std::vector<request_report> requests;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, group_report& x) {
  return f(caf::meta::type_name("dls_group_report"), x.group, x.node, x.tp, x.draining, x.step_s,
           x.kv_free_tokens, x.max_active, x.requests);
}

/// Progress a group reports for one request when it finishes.
struct run_result {
  std::string text;
  int32_t steps = 0;
  int32_t tokens = 0;
  std::string node;
  std::string group;
  double group_ms = 0;  // from reaching the group it finished on to its end there
  request_progress progress;  // its policy state at its last step (its τ is the answer's)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_result& x) {
  return f(caf::meta::type_name("dls_run_result"), x.text, x.steps, x.tokens, x.node, x.group, x.group_ms,
           x.progress);
}

/// A manual regrouping of one node's devices, e.g. {2} -> {1, 1}.
struct regroup_spec {
  std::string node;
  std::vector<int32_t> groups;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, regroup_spec& x) {
  return f(caf::meta::type_name("dls_regroup_spec"), x.node, x.groups);
}

/// The gate's answer to a client: the head endpoint once the token matched.
struct client_reply;

// -- typed endpoints -------------------------------------------------------------------

/// The authenticated head endpoint used by the CLI and by embedding programs.
/// status and reconfigure answer JSON text (schema in docs/embedding.md). It serves only
/// peers that showed a credential to the gate; regroup and shutdown also carry the admin token.
using head_actor = caf::typed_actor<
    caf::replies_to<submit_atom, submit_spec>::with<answer>,
    caf::replies_to<status_atom>::with<std::string>,
    caf::replies_to<actors_atom>::with<std::vector<actor_info>>,
    caf::replies_to<regroup_atom, regroup_spec, std::string>::with<std::string>,  // + the admin token
    // Plans every node's layout from a history of arrivals, flattened (seconds, prompt tokens,
    // answer tokens) triples, and regroups the nodes that differ; + the admin token. Answers
    // JSON {ok, error | layout, regrouped, forecast_rps, ...}.
    caf::replies_to<provision_atom, std::vector<double>, std::string>::with<std::string>,
    caf::replies_to<await_atom>::with<std::string>,
    caf::replies_to<shutdown_atom, std::string>::with<std::string>,               // + the admin token
    caf::replies_to<policy_atom, std::string, std::string>::with<std::string>,    // name + the admin token
    // Moves request ID to group TO at the next step boundary of kind AT (migration_order);
    // + the admin token. Answers JSON {ok, error | from, to, at}.
    caf::replies_to<migrate_atom, uint64_t, std::string, std::string, std::string>::with<std::string>,
    // Withdraws the sender's own request `tag` (a client that went away): it ends with
    // the error "cancelled by the client" and leaves its group's batch.
    caf::reacts_to<cancel_atom, uint64_t>>;

struct client_reply {
  bool ok = false;
  std::string error;
  std::string cluster;
  head_actor head;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, client_reply& x) {
  return f(caf::meta::type_name("dls_client_reply"), x.ok, x.error, x.cluster, x.head);
}

/// The only actor a head publishes. Every other actor refuses peers that showed no credential.
using gate_actor = caf::typed_actor<caf::replies_to<client_atom, std::string>::with<client_reply>,
                                    caf::replies_to<node_join_atom, node_hello>::with<join_reply>>;

/// Registers every type above under the same names on every process.
void add_message_types(caf::actor_system_config& cfg);

}  // namespace dls::runtime
