#pragma once
// Factories for the actors of a node process: the agent, its workers and TP groups.
#include "actors/device_pool.hpp"
#include "actors/policy_view.hpp"
#include "actors/slo_overhead_book.hpp"
#include "gpu/model.hpp"
#include "gpu/tokenizer.hpp"
#include "runtime/messages.hpp"
#include "runtime/ucx_transport.hpp"

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dls::actors {

/// One device slot of `devices`: a detached actor (its own thread) holding an engine shard.
caf::actor spawn_worker(caf::actor_system& sys, std::shared_ptr<const device_pool> devices, int slot, std::string who);

struct group_setup {
  std::string name;  // unique within the cluster: "<node>/g<n>"
  std::string node;
  std::vector<caf::actor> workers;  // rank order
  std::vector<int32_t> devices;
  std::shared_ptr<const gpu::model> model;
  std::shared_ptr<const device_pool> device_set;  // makes the group's collective
  std::shared_ptr<const gpu::tokenizer> tokenizer;
  runtime::engine_defaults defaults;
  caf::actor supervisor;
  std::shared_ptr<const policy_context> policy;
  int32_t group_index = 0;  // the group's number within its node
  caf::node_id head_node;   // the only remote node this group takes orders from
  // The process's UCX data plane (KV caches to and from other nodes); a peer's address comes
  // from the head: request(head, ucx_atom, node) -> std::string.
  std::shared_ptr<runtime::ucx_transport> ucx;
  caf::actor head;  // the head's core actor: the directory of UCX addresses
  // With `ucx.snapshots: peer`, the node whose agent keeps this group's snapshots, and its UCX
  // address (empty: the request actors at the head keep them); the agent sends changes.
  std::string keeper_node, keeper_address;
  // The idle per-step overhead the node's groups of each size count in deadlines (null: the
  // group keeps its own measurement).
  std::shared_ptr<slo_overhead_book> slo_book;
};

/// The step loop over a queue of requests; its workers run each step in lockstep.
caf::actor spawn_tp_group(caf::actor_system& sys, group_setup setup);

/// Callbacks of a node process. `on_ready` runs once the node has joined and
/// registered its actors; `on_exit` asks the process to end with that status.
/// The weights a node process loaded, kept across the actor systems of its joins.
struct loaded_model {
  std::string path;
  std::shared_ptr<const gpu::model> model;
  std::shared_ptr<const gpu::tokenizer> tokenizer;
};

struct node_hooks {
  std::function<void(const std::string&)> on_ready;
  std::function<void(int, const std::string&)> on_exit;
  // The head is lost (or declared this node DEAD) and said to wait `grace_ms` for it: the
  // process joins again (unset, or a grace of 0: the node exits through on_exit).
  std::function<void(const std::string& why, int grace_ms)> on_head_lost;
  // A join got no answer: the connection to the head went down during it, or no reply came
  // within the attempt's time. The process tries again on a fresh connection (unset: the node
  // exits through on_exit).
  std::function<void(const std::string& why)> on_join_lost;
  std::shared_ptr<loaded_model> kept;  // reused by the next join when the model path matches
};

/// Joins the cluster through `gate` with `token` as node `node`, then runs it.
caf::actor spawn_node_agent(caf::actor_system& sys, runtime::gate_actor gate, std::string token, std::string node,
                            node_hooks hooks);

}  // namespace dls::actors
