// The node agent: joins the head with the token, loads the model once for all of the
// node's workers, spawns one worker per device slot and the initial TP groups, sends
// heartbeats, and regroups its workers on the reconfigurer's command.
#include "actors/local_messages.hpp"
#include "actors/node_parts.hpp"
#include "actors/peer_roles.hpp"
#include "policies/placement.hpp"
#include "runtime/log.hpp"
#include "runtime/peer_snapshot.hpp"
#include "runtime/ucx_wireup.hpp"

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <random>

namespace dls::actors {

namespace rt = dls::runtime;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

struct live_group {
  std::string name;
  caf::actor handle;
  std::vector<int32_t> devices;
};

// Requests whose snapshots one node keeps for its peers at most: 65,536 canvases of a 4,096-
// token canvas are 1 GiB of int32 ids, and a request's actor forgets its snapshot when it ends,
// so only requests whose head died unanswered stay until this bound drops the oldest.
constexpr std::size_t kept_snapshots_max = 65536;

// How long one join attempt waits for the head's answer. A head answers in milliseconds (it
// records the node and writes one journal line); 10 s covers a head stalled by a loaded
// machine, and bounds what a lost reply costs before the process joins again on a fresh
// connection. A reply can be lost with its connection (seen once in CI, as a node that waited
// out its whole join; docs/runtime.md has the likely cause).
constexpr auto join_attempt_timeout = std::chrono::seconds(10);

struct agent_state {
  std::string node;
  // Shared by every group this agent forms, regroups included (node_parts.hpp).
  std::shared_ptr<slo_overhead_book> slo_book = std::make_shared<slo_overhead_book>();
  node_hooks hooks;
  rt::join_reply info;
  std::shared_ptr<const gpu::model> model;
  std::shared_ptr<const gpu::tokenizer> tokenizer;
  std::shared_ptr<const policy_context> policy;
  std::shared_ptr<const device_pool> devices;
  std::shared_ptr<rt::ucx_transport> ucx;  // the one UCX context and worker of this process
  // With `ucx.snapshots: peer`: where this node's groups send snapshots (empty: the head keeps
  // them), and the snapshots other nodes' groups sent here.
  std::string keeper_node, keeper_address;
  rt::snapshot_store kept{kept_snapshots_max};
  // Wireup pings in flight (id -> peer node, its address, when sent) and the peers wired so far
  // (node -> address: a peer that joins again from a new process is wired again).
  struct wireup_ping {
    std::string peer, address;
    clock_type::time_point sent;
  };
  std::map<uint64_t, wireup_ping> wireup_pending;
  std::map<std::string, std::string> wired;
  std::mt19937_64 wireup_nonces{std::random_device{}()};
  std::vector<caf::actor> workers;
  std::vector<live_group> groups;
  int next_group = 0;
  bool exiting = false;
  bool joined = false;
  rt::gate_actor gate;
  std::string token;
  static inline const char* name = "dls.node_agent";
};

using agent_ptr = caf::stateful_actor<agent_state>*;

void leave(agent_ptr self, int code, const std::string& why) {
  auto& st = self->state;
  if (st.exiting) return;
  st.exiting = true;
  rt::log_line("node " + st.node, why);
  for (auto& g : st.groups) self->send_exit(g.handle, caf::exit_reason::user_shutdown);
  for (auto& w : st.workers) self->send_exit(w, caf::exit_reason::user_shutdown);
  st.groups.clear();
  st.workers.clear();
  if (st.hooks.on_exit) st.hooks.on_exit(code, why);
  self->quit();
}

// The join got no answer: the process joins again on a fresh connection if it was told how,
// and exits otherwise. Nothing runs yet, so nothing is lost.
void join_lost(agent_ptr self, const std::string& why) {
  auto& st = self->state;
  if (st.exiting || st.joined) return;
  if (!st.hooks.on_join_lost) {
    leave(self, 1, "join failed: " + why);
    return;
  }
  st.exiting = true;
  rt::log_line("node " + st.node, "join failed: " + why + "; joining again on a fresh connection");
  st.hooks.on_join_lost(why);
  self->quit();
}

// Splits the node's workers into groups of the given sizes, in device order.
std::vector<rt::group_info> make_groups(agent_ptr self, const std::vector<int32_t>& sizes) {
  auto& st = self->state;
  std::vector<rt::group_info> out;
  std::size_t next = 0;
  for (auto size : sizes) {
    group_setup g;
    // A node that rejoins after a crash gets fresh names: "node1/g0", later "node1/g2.0".
    auto prefix = st.info.incarnation > 1 ? std::to_string(st.info.incarnation) + "." : std::string();
    g.group_index = st.next_group;
    g.name = st.node + "/g" + prefix + std::to_string(st.next_group++);
    g.node = st.node;
    for (int32_t i = 0; i < size; ++i, ++next) {
      g.workers.push_back(st.workers[next]);
      g.devices.push_back(static_cast<int32_t>(next));
    }
    g.model = st.model;
    g.device_set = st.devices;
    g.tokenizer = st.tokenizer;
    g.defaults = st.info.engine;
    g.supervisor = st.info.supervisor;
    g.head_node = st.info.head ? st.info.head.node() : caf::node_id{};
    g.policy = st.policy;
    g.ucx = st.ucx;
    g.head = st.info.head;
    g.keeper_node = st.keeper_node;
    g.keeper_address = st.keeper_address;
    g.slo_book = st.slo_book;
    rt::group_info info;
    info.name = g.name;
    info.node = st.node;
    info.degree = size;
    info.devices = g.devices;
    auto devices = g.devices;
    info.handle = spawn_tp_group(self->system(), std::move(g));
    st.groups.push_back({info.name, info.handle, devices});
    out.push_back(info);
  }
  return out;
}

void start_node(agent_ptr self, rt::join_reply reply) {
  auto& st = self->state;
  st.info = std::move(reply);
  self->monitor(st.info.head);
  try {
    // A node that joins again keeps the weights it loaded (the model path is the cluster's).
    auto& kept = st.hooks.kept;
    if (kept && kept->model && kept->path == st.info.model_path) {
      st.model = kept->model;
      st.tokenizer = kept->tokenizer;
    } else {
      st.model = gpu::load_model(st.info.model_path);
      st.tokenizer = gpu::load_tokenizer(st.info.model_path);
      if (kept) *kept = {st.info.model_path, st.model, st.tokenizer};
    }
  } catch (const std::exception& e) {
    leave(self, 1, std::string("cannot load the model: ") + e.what());
    return;
  }
  try {
    st.policy = make_policy_context(st.info.scheduler, st.info.engine);
  } catch (const std::exception& e) {
    leave(self, 1, std::string("cannot load the scheduler's profile or quality curve: ") + e.what());
    return;
  }
  const auto& devices = st.info.node.devices;
  try {
    st.devices = device_pool::open(devices, st.model);
  } catch (const std::exception& e) {
    leave(self, 1, std::string("cannot open the node's devices: ") + e.what());
    return;
  }
  try {
    st.ucx = std::make_shared<rt::ucx_transport>(st.info.ucx, st.info.data_key);
  } catch (const std::exception& e) {
    leave(self, 1, std::string("cannot start the UCX data plane: ") + e.what());
    return;
  }
  {
    // Unasked transfers: wireup pings and pongs (answered on the UCX thread), and with
    // `ucx.snapshots: peer` the snapshots other nodes keep here. The transport owns this
    // handler, so it holds the transport by plain pointer.
    auto me = caf::actor_cast<caf::actor>(self);
    const bool keeps = st.info.ucx.snapshots == "peer";
    auto* t = st.ucx.get();
    st.ucx->on_unasked([me, keeps, t](uint64_t id, const std::string& error, rt::ucx_payload payload) {
      if (rt::is_wireup(id)) {
        if (auto pong = rt::answer_wireup(*t, id, error, payload))
          caf::send_as(me, me, wired_atom::value, pong->first, pong->second);
      } else if (keeps) {
        caf::send_as(me, me, keep_atom::value, error, std::move(payload));
      } else {
        rt::log_line("ucx", "an unasked transfer dropped: this node keeps no snapshots (ucx.snapshots: head)");
      }
    });
  }
  // Registered before the groups, so a peer finds this node's address once its groups exist.
  self->request(st.info.head, std::chrono::seconds(30), rt::ucx_atom::value, st.node, st.ucx->address())
      .then([](bool) {},
            [=](caf::error& e) { leave(self, 1, "the head did not register this node's UCX address: " + to_string(e)); });
  std::vector<rt::actor_info> rows;
  auto pid = static_cast<int32_t>(::getpid());
  for (int i = 0; i < devices.slots(); ++i) {
    auto who = st.node + "/w" + std::to_string(i);
    st.workers.push_back(spawn_worker(self->system(), st.devices, i, who));
    rows.push_back({0, "worker", who, st.node, pid, "ALIVE", 0, json{{"device", st.devices->describe(i)}}.dump()});
  }
  std::vector<int32_t> sizes(st.info.node.groups.begin(), st.info.node.groups.end());
  auto groups = make_groups(self, sizes);
  self->request(st.info.head, std::chrono::seconds(30), rt::groups_atom::value, st.node, groups, rows)
      .then(
          [=](const std::vector<rt::group_info>& registered) {
            rt::log_line("node " + self->state.node, "ready: " + std::to_string(self->state.workers.size()) +
                                                           " workers, " + std::to_string(registered.size()) +
                                                           " groups, model " + self->state.info.model_path);
            if (self->state.hooks.on_ready) self->state.hooks.on_ready("joined " + self->state.info.cluster);
          },
          [=](caf::error& e) { leave(self, 1, "the head did not register this node's actors: " + to_string(e)); });
  self->send(self, rt::beat_atom::value);
}

void join(agent_ptr self) {
  auto& st = self->state;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  rt::node_hello hello{st.token, st.node, host, static_cast<int32_t>(::getpid()), 0, caf::actor_cast<caf::actor>(self)};
  // A connection lost during the join ends no request of this actor: the monitor tells.
  self->monitor(st.gate);
  self->request(st.gate, join_attempt_timeout, rt::node_join_atom::value, hello)
      .then(
          [=](rt::join_reply& r) {
            if (self->state.exiting) return;
            self->state.joined = true;
            if (!r.ok) {
              leave(self, 2, "the head refused node '" + self->state.node + "': " + r.error);
              return;
            }
            rt::log_line("node " + self->state.node,
                         "joined cluster '" + r.cluster + "' (incarnation " + std::to_string(r.incarnation) + ")");
            start_node(self, std::move(r));
          },
          [=](caf::error& e) {
            join_lost(self, e == caf::sec::request_timeout
                                ? "no answer from the head within " +
                                      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(join_attempt_timeout).count()) + " s"
                                : to_string(e));
          });
}

// The head is gone (or declared this node DEAD): within the grace window the process joins
// again with a fresh actor system (no CAF connection state of the lost head survives) and
// keeps the weights it loaded. The requests its groups held resume at the head from their last
// canvas in its log, so the groups and workers end here.
void lose_head(agent_ptr self, const std::string& why, bool head_alive) {
  auto& st = self->state;
  if (st.exiting) return;
  if (st.info.head_grace_ms <= 0 || !st.hooks.on_head_lost) {
    leave(self, 1, why + (head_alive ? "; exiting" : ""));
    return;
  }
  st.exiting = true;
  rt::log_line("node " + st.node, why + "; joining again within " + std::to_string(st.info.head_grace_ms) + " ms");
  for (auto& g : st.groups) self->send_exit(g.handle, caf::exit_reason::user_shutdown);
  for (auto& w : st.workers) self->send_exit(w, caf::exit_reason::user_shutdown);
  st.groups.clear();
  st.workers.clear();
  st.hooks.on_head_lost(why, st.info.head_grace_ms);
  self->quit();
}

// Drains every group, regroups the workers and resumes on the new groups, from its canvas,
// every request the groups still held. A draining group hands each request that reaches its
// refresh boundary to the supervisor, which places it on another node's group (or keeps it
// until these new groups are up); what is left when its requests inside a block have reached
// theirs comes back here. Replies with the new groups and the measured times.
void regroup(agent_ptr self, rt::regroup_spec spec, caf::response_promise rp) {
  auto& st = self->state;
  auto t0 = clock_type::now();
  auto old = st.groups;
  auto items = std::make_shared<std::vector<rt::work_item>>();
  auto handed_back = std::make_shared<int32_t>(0);  // requests the groups handed to the supervisor
  auto left = std::make_shared<std::size_t>(old.size());
  auto resume = [=]() mutable {
    auto& st = self->state;
    auto t_drained = clock_type::now();
    for (auto& g : old) self->send_exit(g.handle, caf::exit_reason::user_shutdown);
    st.groups.clear();
    auto groups = make_groups(self, spec.groups);
    // Spread the moved requests over the new groups (policy::spread_requests), in request order.
    std::sort(items->begin(), items->end(),
              [](const auto& a, const auto& b) { return a.request_id < b.request_id; });
    std::vector<int> degrees;
    for (auto& g : groups) degrees.push_back(g.degree);
    const auto where = policy::spread_requests(items->size(), degrees);
    for (std::size_t i = 0; i < items->size(); ++i) {
      auto& item = (*items)[i];
      auto best = static_cast<std::size_t>(where[i]);
      auto name = groups[best].name;
      self->request(groups[best].handle, std::chrono::seconds(30), rt::enqueue_atom::value, item)
          .then([] {},
                [=](caf::error& e) {
                  rt::log_line("node " + self->state.node, "moving a request to " + name + " failed: " + to_string(e));
                });
    }
    auto ms = [](clock_type::time_point a, clock_type::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    json stats{{"moved", items->size() + static_cast<std::size_t>(*handed_back)},
               {"handed_back", *handed_back},
               {"drain_ms", ms(t0, t_drained)},
               {"regroup_ms", ms(t_drained, clock_type::now())}};
    rp.deliver(groups, stats.dump());
  };
  if (old.empty()) {
    resume();
    return;
  }
  for (auto& g : old) {
    self->request(g.handle, std::chrono::minutes(5), rt::drain_atom::value)
        .then(
            [=](std::vector<rt::work_item>& drained, int32_t handed) mutable {
              for (auto& i : drained) items->push_back(std::move(i));
              *handed_back += handed;
              if (--*left == 0) resume();
            },
            [=](caf::error& e) mutable {
              rt::log_line("node " + self->state.node, "drain of " + g.name + " failed: " + to_string(e));
              if (--*left == 0) resume();
            });
  }
}

bool from_head(agent_ptr self) {
  const auto& head = self->state.info.head;
  return head ? sender_from(self, head.node(), "node agent") : sender_is_local(self, "node agent");
}

caf::behavior node_agent(agent_ptr self, rt::gate_actor gate, std::string token, std::string node, node_hooks hooks) {
  auto& st = self->state;
  st.node = node;
  st.hooks = std::move(hooks);
  st.gate = std::move(gate);
  st.token = std::move(token);
  self->set_exit_handler([=](caf::exit_msg&) { leave(self, 0, "stopping"); });
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    if (st.info.head && dm.source == st.info.head.address())
      lose_head(self, "lost the head (" + to_string(dm.reason) + ")", false);
    else if (!st.joined && dm.source == st.gate.address())
      join_lost(self, "the connection to the head went down (" + to_string(dm.reason) + ")");
  });
  join(self);
  return {
      [=](rt::beat_atom) {
        auto& st = self->state;
        if (st.exiting) return;
        self->send(st.info.head, rt::beat_atom::value, st.node);
        self->delayed_send(self, std::chrono::milliseconds(st.info.heartbeat_interval_ms), rt::beat_atom::value);
      },
      // Orders come only from the head this node joined (or this process).
      [=](rt::regroup_atom, rt::regroup_spec& spec) -> caf::result<caf::message> {
        if (!from_head(self)) return caf::make_error(caf::sec::runtime_error, std::string("not from the head"));
        auto rp = self->make_response_promise();
        regroup(self, std::move(spec), rp);
        return rp;
      },
      [=](rt::node_dead_atom) {
        if (from_head(self)) lose_head(self, "the head declared this node DEAD (missed heartbeats)", true);
      },
      // Peer-kept snapshots (`ucx.snapshots: peer`): the head names this node's keeper ...
      [=](rt::keeper_atom, const std::string& node, const std::string& address) {
        if (!from_head(self)) return;
        auto& st = self->state;
        if (st.keeper_node == node && st.keeper_address == address) return;
        st.keeper_node = node;
        st.keeper_address = address;
        rt::log_line("node " + st.node, node.empty() ? std::string("no peer keeps snapshots: the head keeps them")
                                                     : "snapshots go to node '" + node + "'");
        for (auto& g : st.groups) self->send(g.handle, rt::keeper_atom::value, node, address);
      },
      // Data-plane wireup: the head names a peer that joined before this node; a ping and its
      // pong set up both endpoints now instead of in the first migration (runtime/ucx_wireup.hpp).
      [=](rt::wireup_atom, const std::string& peer, const std::string& address) {
        if (!from_head(self)) return;
        auto& st = self->state;
        if (!st.ucx) return;
        if (auto w = st.wired.find(peer); w != st.wired.end() && w->second == address) {
          // Wired before (a head that restarted asks again): only the head has to learn it.
          self->send(st.info.head, rt::wireup_atom::value, st.node, peer);
          return;
        }
        const uint64_t id = rt::wireup_ping_id(st.wireup_nonces());
        st.wireup_pending[id] = {peer, address, clock_type::now()};
        auto me = caf::actor_cast<caf::actor>(self);
        rt::send_wireup_ping(*st.ucx, address, id, [me, id](const std::string& error) {
          if (!error.empty()) caf::send_as(me, me, wired_atom::value, id, error);
        });
      },
      [=](wired_atom, uint64_t id, const std::string& error) {
        if (!sender_is_local(self, "node agent")) return;
        auto& st = self->state;
        auto it = st.wireup_pending.find(id);
        if (it == st.wireup_pending.end()) return;  // a second report of one ping (pong after a late failure)
        const auto ping = it->second;
        st.wireup_pending.erase(it);
        const std::string& peer = ping.peer;
        if (!error.empty()) {
          rt::log_line("node " + st.node, "data plane to node '" + peer + "' not wired at join (" + error +
                                              "); the first transfer to it will set it up");
          return;
        }
        st.wired[peer] = ping.address;
        char ms[32];
        std::snprintf(ms, sizeof ms, "%.1f", std::chrono::duration<double, std::milli>(clock_type::now() - ping.sent).count());
        rt::log_line("node " + st.node, "data plane to node '" + peer + "' wired (" + ms + " ms)");
        self->send(st.info.head, rt::wireup_atom::value, st.node, peer);
      },
      // ... another node's group sent one here (from this process's UCX thread) ...
      [=](keep_atom, const std::string& error, rt::ucx_payload& payload) {
        if (!sender_is_local(self, "node agent")) return;
        auto& st = self->state;
        if (!error.empty()) {
          rt::log_line("node " + st.node, "a peer's snapshot did not arrive: " + error);
          return;
        }
        try {
          st.kept.put(rt::decode_peer_snapshot(payload.view()));
        } catch (const std::invalid_argument& e) {
          rt::log_line("node " + st.node, std::string("a peer's snapshot refused: ") + e.what());
        }
      },
      // ... and the head fetches one for a request that lost its group, or says it ended.
      [=](rt::fetch_snap_atom, uint64_t id) -> caf::result<std::vector<char>, int32_t, int32_t> {
        if (!from_head(self)) return caf::make_error(caf::sec::runtime_error, std::string("not from the head"));
        const auto* s = self->state.kept.find(id);
        if (!s)
          return caf::make_error(caf::sec::runtime_error,
                                 "node '" + self->state.node + "' keeps no snapshot of request " + std::to_string(id));
        return {s->canvas, s->steps, s->tokens};
      },
      [=](rt::forget_snap_atom, uint64_t id) {
        if (from_head(self)) self->state.kept.forget(id);
      },
      [=](rt::shutdown_atom) {
        if (from_head(self)) leave(self, 0, "shutdown requested by the head");
      },
  };
}

}  // namespace

caf::actor spawn_node_agent(caf::actor_system& sys, rt::gate_actor gate, std::string token, std::string node,
                            node_hooks hooks) {
  return sys.spawn(node_agent, std::move(gate), std::move(token), std::move(node), std::move(hooks));
}

}  // namespace dls::actors
