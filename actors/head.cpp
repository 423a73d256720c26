// The head core: membership (join, heartbeats, DEAD detection), the actor directory,
// and cluster status. The step loop never passes through here.
#include "actors/directory.hpp"
#include "actors/head_messages.hpp"
#include "actors/liveness.hpp"
#include "actors/peer_roles.hpp"
#include "actors/spawn.hpp"
#include "runtime/log.hpp"
#include "runtime/ucx_seal.hpp"

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <chrono>
#include <map>
#include <set>

namespace dls::actors {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using json = nlohmann::json;
namespace rt = dls::runtime;

namespace {

struct node_entry {
  std::string name;
  std::string host;
  int32_t pid = 0;
  caf::actor agent;
  std::string state = "PENDING";  // PENDING (never joined) | ALIVE | DEAD
  std::string reason;              // why it is DEAD
  bool ready = false;              // workers and groups registered
  uint64_t dir_id = 0;
  uint32_t joins = 0;
  std::string ucx_address;  // its UCX worker address, registered after the join
  std::set<std::string> ucx_peers;  // the nodes whose data plane it has wired to (both ways)
  clock_type::time_point last_beat;
};

struct head_state {
  rt::cluster_config cfg;
  directory dir;
  std::map<std::string, node_entry> nodes;
  caf::actor supervisor;
  std::string policy;  // the policy set the groups run (scheduler.policy, then `policy set`)
  std::vector<caf::response_promise> awaiting;  // `await`: all nodes ready
  std::function<void()> on_shutdown;
  peer_registry_ptr peers;
  rt::head_journal_ptr journal;  // membership and layouts are logged here (may be null)
  // The supervisor's calibration of the path overhead per request (supervisor.cpp), asked for
  // once every node has first joined; `await` answers after it, so a client that waits for the
  // cluster (as `up` does) never runs beside the probes.
  enum class calibration { not_asked, running, done } slo_calibration = calibration::not_asked;
  double slo_request_overhead_ms = -1;  // < 0: not known yet
  // The data plane's key (ucx.encrypt): made once per cluster, kept in the journal so that a
  // restarted head hands rejoining nodes the key their peers still seal with.
  std::string data_key;
  bool stopping = false;
  static inline const char* name = "dls.head";
};

using head_ptr = caf::stateful_actor<head_state>*;

bool all_ready(const head_state& st) {
  for (const auto& [name, n] : st.nodes)
    if (n.state != "ALIVE" || !n.ready) return false;
  return true;
}

void answer_waiters(head_ptr self) {
  auto& st = self->state;
  if (!all_ready(st)) return;
  using cal = head_state::calibration;
  if (st.slo_calibration != cal::done) {
    if (st.slo_calibration == cal::running || !st.supervisor) return;
    st.slo_calibration = cal::running;
    // Each probe has its own timeout there, so the supervisor always answers.
    self->request(st.supervisor, caf::infinite, rt::calibrate_atom::value, st.cfg.scheduler.slo_request_overhead_ms)
        .then(
            [=](double ms) {
              self->state.slo_request_overhead_ms = ms;
              self->state.slo_calibration = cal::done;
              answer_waiters(self);
            },
            [=](caf::error& e) {
              rt::log_line("head", "no path overhead for deadlines: " + self->system().render(e));
              self->state.slo_calibration = cal::done;
              answer_waiters(self);
            });
    return;
  }
  for (auto& rp : st.awaiting) rp.deliver(std::string(R"({"ok":true})"));
  st.awaiting.clear();
}

// With `ucx.snapshots: peer`, each node's groups send their snapshots to the next live node
// (by name, cyclically) whose data plane is up; a lone node has none and its requests' actors
// keep them. Sent to every live node whenever membership changes, so a node's keeper is never
// a dead one for longer than the head takes to notice.
void tell_keepers(head_ptr self) {
  auto& st = self->state;
  if (st.cfg.ucx.snapshots != "peer") return;
  std::vector<const node_entry*> up;  // st.nodes is a std::map: in name order
  for (const auto& [name, n] : st.nodes)
    if (n.state == "ALIVE" && n.agent && !n.ucx_address.empty()) up.push_back(&n);
  for (std::size_t i = 0; i < up.size(); ++i) {
    const node_entry* keeper = up.size() > 1 ? up[(i + 1) % up.size()] : nullptr;
    self->send(up[i]->agent, rt::keeper_atom::value, keeper ? keeper->name : std::string(),
               keeper ? keeper->ucx_address : std::string());
  }
}

// A node's data plane in its directory row (`actors`): the transports, its address's size and
// the peers wired to it.
void publish_ucx(head_state& st, const node_entry& n) {
  auto* row = st.dir.find(n.dir_id);
  if (!row) return;
  auto d = json::parse(row->details, nullptr, false);
  if (!d.is_object()) return;
  d["ucx"] = {{"tls", st.cfg.ucx.tls}, {"address_bytes", n.ucx_address.size()}, {"peers", n.ucx_peers}};
  st.dir.update(n.dir_id, "", d.dump());
}

// A node process that is gone (dead, or joining again as a new process) is wired to nobody.
void forget_wireup(head_state& st, node_entry& n) {
  n.ucx_peers.clear();
  publish_ucx(st, n);
  for (auto& [name, other] : st.nodes)
    if (other.ucx_peers.erase(n.name) && other.state == "ALIVE") publish_ucx(st, other);
}

void mark_dead(head_ptr self, node_entry& n, const std::string& reason) {
  if (n.state != "ALIVE") return;
  n.state = "DEAD";
  n.reason = reason;
  n.ready = false;
  forget_wireup(self->state, n);
  int rows = self->state.dir.mark_node_dead(n.name);
  rt::log_line("head", "node '" + n.name + "' is DEAD: " + reason + " (" + std::to_string(rows) +
                           " actors marked DEAD)");
  if (n.agent) {
    // If it was only hung, it learns on waking that it was replaced and exits.
    self->send(n.agent, rt::node_dead_atom::value);
    self->demonitor(n.agent);
  }
  n.agent = nullptr;
  if (self->state.supervisor) self->send(self->state.supervisor, rt::node_dead_atom::value, n.name);
  tell_keepers(self);
}

std::string status_json(const head_state& st) {
  json j;
  j["cluster"] = st.cfg.name;
  j["policy"] = st.policy;
  j["slo_scale"] = st.cfg.scheduler.slo_scale;
  if (st.slo_request_overhead_ms >= 0) j["slo_request_overhead_ms"] = st.slo_request_overhead_ms;
  j["nodes"] = json::array();
  auto now = clock_type::now();
  for (const auto& cfg_node : st.cfg.nodes) {
    const auto& n = st.nodes.at(cfg_node.name);
    json node{{"name", n.name},
              {"host", n.host.empty() ? cfg_node.host : n.host},
              {"pid", n.pid},
              {"state", n.state},
              {"devices", {{"kind", cfg_node.devices.kind}, {"slots", cfg_node.devices.slots()}}},
              {"joins", n.joins}};
    if (n.state == "ALIVE")
      node["heartbeat_age_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(now - n.last_beat).count();
    if (!n.reason.empty()) node["reason"] = n.reason;
    j["nodes"].push_back(node);
  }
  j["groups"] = json::array();
  auto live = json::array();  // in-flight requests with their policy state
  for (const auto& [id, row] : st.dir.rows()) {
    if (row.kind == "tp_group" && row.state == "ALIVE") {
      const auto* typed = st.dir.group_of(id);
      auto d = typed ? typed->to_json() : json::parse(row.details, nullptr, false);
      json g{{"id", row.id}, {"name", row.name}, {"node", row.node}};
      if (d.is_object()) g.update(d);
      j["groups"].push_back(g);
    } else if (const auto* d = st.dir.request_of(id)) {
      if (d->status != "FINISHED" && d->status != "FAILED") {
        auto all = d->to_json();
        json r{{"id", row.id}, {"name", row.name}, {"status", d->status}};
        for (const char* k : {"tau", "slack_ms", "deadline_ms", "next_step", "group", "migrations"})
          if (all.contains(k)) r[k] = all[k];
        live.push_back(r);
      }
    }
  }
  for (const auto& [id, row] : st.dir.rows())
    if (row.kind == "reconfigurer" || row.kind == "migrator")
      if (auto d = json::parse(row.details, nullptr, false); d.is_object()) j[row.kind] = d;
  // Counted over the head's life: finished rows leave the directory after the retention.
  auto counts = st.dir.requests();
  j["requests"] = {{"in_flight", counts.in_flight},
                   {"finished", counts.finished},
                   {"failed", counts.failed},
                   {"retained", counts.retained},
                   {"live", live}};
  return j.dump();
}

caf::error refused() { return caf::make_error(caf::sec::runtime_error, std::string("not authenticated")); }

// The core is internal: its clients are the head's own actors, plus each node's agent for
// heartbeats and group registration (checked against the agent that joined under that name).
bool from_head(head_ptr self) { return sender_is_local(self, "head"); }

bool from_agent_of(head_ptr self, const node_entry& n) {
  if (sender_is_local(self)) return true;
  if (n.agent && sender_may(self, *self->state.peers, role_node, "head") &&
      n.agent == caf::actor_cast<caf::actor>(self->current_sender()))
    return true;
  return false;
}

// Logs a membership or layout change; a head that cannot persist it says so and carries on
// (what it lost is a node's incarnation count or layout, not a request).
template <class F>
void log_change(head_ptr self, const char* what, F&& write) {
  if (!self->state.journal) return;
  try {
    write(*self->state.journal);
  } catch (const std::exception& e) {
    rt::log_line("head", std::string("cannot log the ") + what + ": " + e.what());
  }
}

caf::behavior head_core(head_ptr self, rt::cluster_config cfg, peer_registry_ptr peers,
                        std::function<void()> on_shutdown, rt::head_journal_ptr journal) {
  auto& st = self->state;
  st.peers = std::move(peers);
  st.journal = std::move(journal);
  st.cfg = std::move(cfg);
  st.dir = directory(st.cfg.retention);
  st.on_shutdown = std::move(on_shutdown);
  st.policy = st.cfg.scheduler.policy;
  if (st.journal && !st.journal->recovered().policy.empty()) st.policy = st.journal->recovered().policy;
  if (st.cfg.ucx.encrypt) {
    st.data_key = st.journal ? st.journal->recovered().data_key : std::string();
    if (st.data_key.empty()) {
      st.data_key = rt::make_seal_key();
      if (st.journal) st.journal->data_key(st.data_key);
    }
  }
  for (const auto& n : st.cfg.nodes) {
    node_entry e;
    e.name = n.name;
    // A restarted head keeps counting joins, so a rejoining node's groups get fresh names.
    if (st.journal)
      if (auto it = st.journal->recovered().joins.find(n.name); it != st.journal->recovered().joins.end())
        e.joins = it->second;
    st.nodes.emplace(n.name, e);
  }
  self->set_down_handler([=](caf::down_msg& dm) {
    for (auto& [name, n] : self->state.nodes)
      if (n.agent && n.agent.address() == dm.source)
        mark_dead(self, n, "connection lost (" + to_string(dm.reason) + ")");
  });
  self->delayed_send(self, std::chrono::milliseconds(st.cfg.heartbeat_interval_ms / 2), rt::check_atom::value);
  return {
      [=](rt::node_join_atom, rt::node_hello& hello) -> caf::result<rt::join_reply> {
        if (!from_head(self)) return refused();
        auto& st = self->state;
        rt::join_reply r;
        auto* spec = st.cfg.find_node(hello.node);
        // A join from the process this node's live incarnation runs in means that incarnation
        // is gone: its join reply was lost and the process joined again on a fresh connection
        // (its actors ended with the old one), so it makes way.
        if (spec && st.nodes[hello.node].state == "ALIVE" && st.nodes[hello.node].pid == hello.pid &&
            st.nodes[hello.node].host == hello.host && !st.stopping)
          mark_dead(self, st.nodes[hello.node], "replaced by a new join from its process (pid " +
                                                    std::to_string(hello.pid) + ")");
        if (!spec) {
          r.error = "node '" + hello.node + "' is not in the cluster file " + st.cfg.file;
        } else if (st.nodes[hello.node].state == "ALIVE") {
          r.error = "node '" + hello.node + "' has already joined (pid " +
                    std::to_string(st.nodes[hello.node].pid) + ")";
        } else if (st.stopping) {
          r.error = "the cluster is shutting down";
        }
        if (!r.error.empty()) {
          rt::log_line("head", "refused join from pid " + std::to_string(hello.pid) + ": " + r.error);
          return r;
        }
        auto& n = st.nodes[hello.node];
        n.host = hello.host;
        n.pid = hello.pid;
        n.agent = hello.agent;
        n.state = "ALIVE";
        n.reason.clear();
        n.ready = false;
        n.ucx_address.clear();
        n.last_beat = clock_type::now();
        ++n.joins;
        log_change(self, "join", [&](rt::head_journal& j) { j.joined(n.name, n.joins); });
        self->monitor(n.agent);
        json details{{"host", hello.host}, {"devices", spec->devices.slots()}, {"kind", spec->devices.kind}};
        if (n.dir_id == 0) {
          n.dir_id = st.dir.add({0, "node", n.name, n.name, hello.pid, "ALIVE", 0, details.dump()});
        } else if (auto* row = st.dir.find(n.dir_id)) {
          row->pid = hello.pid;
          row->state = "ALIVE";
          row->restarts += 1;
          row->details = details.dump();
        }
        rt::log_line("head", "node '" + n.name + "' joined from " + hello.host + " (pid " +
                                 std::to_string(hello.pid) + ")");
        r.ok = true;
        r.cluster = st.cfg.name;
        r.node = *spec;
        r.engine = st.cfg.engine;
        r.model_path = st.cfg.model_path;
        r.heartbeat_interval_ms = st.cfg.heartbeat_interval_ms;
        r.head = caf::actor_cast<caf::actor>(self);
        r.supervisor = st.supervisor;
        r.incarnation = n.joins;
        r.scheduler = st.cfg.scheduler;
        r.head_grace_ms = st.cfg.head_grace_ms;
        r.ucx = st.cfg.ucx;
        r.data_key = st.data_key;
        return r;
      },
      // A node's current groups (at join and after every regroup), plus its workers at
      // join. Earlier groups of that node are retired in the directory.
      [=](rt::groups_atom, const std::string& node, std::vector<rt::group_info>& groups,
          std::vector<rt::actor_info>& workers) -> caf::message {
        auto& st = self->state;
        auto it = st.nodes.find(node);
        if (it == st.nodes.end() || it->second.state != "ALIVE" || !from_agent_of(self, it->second))
          return caf::make_message(std::vector<rt::group_info>{});
        for (auto& row_copy : st.dir.list())
          if (row_copy.kind == "tp_group" && row_copy.node == node && row_copy.state == "ALIVE")
            st.dir.update(row_copy.id, "DEAD", "");
        for (auto& w : workers) st.dir.add(w);
        std::vector<int32_t> sizes;
        for (const auto& g : groups) sizes.push_back(g.degree);
        log_change(self, "layout", [&](rt::head_journal& j) { j.layout(node, sizes); });
        for (auto& g : groups) {
          std::string devs;
          for (auto d : g.devices) devs += (devs.empty() ? "" : ",") + std::to_string(d);
          json details{{"degree", g.degree}, {"devices", g.devices}, {"queue", 0}};
          g.id = st.dir.add({0, "tp_group", g.name, node, it->second.pid, "ALIVE", 0, details.dump()});
        }
        it->second.ready = true;
        self->send(st.supervisor, rt::groups_atom::value, node, groups);
        answer_waiters(self);
        return caf::make_message(groups);
      },
      // The data plane's directory: a node registers its UCX worker address once UCX runs, and
      // a node looks up a peer's before it sends that peer a buffer.
      [=](rt::ucx_atom, const std::string& node, const std::string& address) -> caf::result<bool> {
        auto& st = self->state;
        auto it = st.nodes.find(node);
        if (it == st.nodes.end() || it->second.state != "ALIVE" || !from_agent_of(self, it->second)) return refused();
        it->second.ucx_address = address;
        forget_wireup(st, it->second);
        tell_keepers(self);
        publish_ucx(st, it->second);
        // The newcomer wires its data plane to every live peer now (runtime/ucx_wireup.hpp).
        for (const auto& [name, n] : st.nodes)
          if (name != node && n.state == "ALIVE" && n.agent && !n.ucx_address.empty())
            self->send(it->second.agent, rt::wireup_atom::value, name, n.ucx_address);
        return true;
      },
      [=](rt::wireup_atom, const std::string& node, const std::string& peer) {
        auto& st = self->state;
        auto a = st.nodes.find(node);
        auto b = st.nodes.find(peer);
        if (a == st.nodes.end() || a->second.state != "ALIVE" || !from_agent_of(self, a->second)) return;
        if (b == st.nodes.end() || b->second.state != "ALIVE" || node == peer) return;
        a->second.ucx_peers.insert(peer);
        b->second.ucx_peers.insert(node);
        publish_ucx(st, a->second);
        publish_ucx(st, b->second);
      },
      [=](rt::ucx_atom, const std::string& node) -> caf::result<std::string> {
        auto& st = self->state;
        // Any actor of a joined node (a group or worker about to move a cache) may ask.
        if (!sender_is_local(self) && !sender_may(self, *st.peers, role_node, "head")) return refused();
        auto it = st.nodes.find(node);
        if (it == st.nodes.end() || it->second.state != "ALIVE" || it->second.ucx_address.empty())
          return caf::make_error(caf::sec::runtime_error, "node '" + node + "' has no UCX address (not joined, or dead)");
        return it->second.ucx_address;
      },
      // A request actor resuming from a snapshot a peer keeps, and one that ended.
      [=](rt::fetch_snap_atom, const std::string& node, uint64_t id) -> caf::result<caf::message> {
        if (!sender_is_local(self, "head")) return refused();
        auto it = self->state.nodes.find(node);
        if (it == self->state.nodes.end() || it->second.state != "ALIVE" || !it->second.agent)
          return caf::make_error(caf::sec::runtime_error, "node '" + node + "', which kept it, is not alive");
        return self->delegate(it->second.agent, rt::fetch_snap_atom::value, id);
      },
      [=](rt::forget_snap_atom, const std::string& node, uint64_t id) {
        if (!sender_is_local(self, "head")) return;
        auto it = self->state.nodes.find(node);
        if (it != self->state.nodes.end() && it->second.state == "ALIVE" && it->second.agent)
          self->send(it->second.agent, rt::forget_snap_atom::value, id);
      },
      [=](rt::register_atom, rt::actor_info& row) -> caf::result<uint64_t> {
        if (!from_head(self)) return refused();
        if (row.pid == 0) row.pid = static_cast<int32_t>(::getpid());
        return self->state.dir.add(std::move(row));
      },
      [=](rt::detail_atom, uint64_t id, const std::string& state, const std::string& details) {
        if (!from_head(self)) return;
        self->state.dir.update(id, state, details);
      },
      [=](group_row_atom, uint64_t row_id, group_details& details) {
        if (!from_head(self)) return;
        self->state.dir.update_group(row_id, std::move(details));
      },
      [=](request_row_atom, uint64_t request_id, const std::string& state, request_details& details, bool answered) {
        if (!from_head(self)) return;
        self->state.dir.update_request(request_id, state, std::move(details), answered,
                                       static_cast<int32_t>(::getpid()));
      },
      [=](rt::beat_atom, const std::string& node) {
        auto it = self->state.nodes.find(node);
        if (it == self->state.nodes.end()) return;
        auto& n = it->second;
        if (n.state == "ALIVE" && n.agent && from_agent_of(self, n)) n.last_beat = clock_type::now();
      },
      [=](rt::check_atom) {
        if (!from_head(self)) return;
        auto& st = self->state;
        auto now = clock_type::now();
        st.dir.expire(now);
        const auto dead_after = std::chrono::milliseconds(st.cfg.dead_after_ms);
        std::vector<clock_type::time_point> alive_beats;
        for (auto& [name, n] : st.nodes) {
          if (n.state != "ALIVE") continue;
          if (silent_too_long(n.last_beat, now, dead_after)) {
            auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - n.last_beat).count();
            mark_dead(self, n, "no heartbeat for " + std::to_string(age) + " ms");
          } else {
            alive_beats.push_back(n.last_beat);
          }
        }
        auto next = next_liveness_check(now, alive_beats, dead_after,
                                        std::chrono::milliseconds(st.cfg.heartbeat_interval_ms / 2));
        self->delayed_send(self, std::chrono::ceil<std::chrono::milliseconds>(next - now), rt::check_atom::value);
      },
      // The reconfigurer asks which agent runs `node` and whether `groups` fit it.
      [=](rt::check_atom, const rt::regroup_spec& spec) -> caf::message {
        if (!from_head(self)) return caf::make_message(std::string("not authenticated"), caf::actor{});
        auto& st = self->state;
        auto* node_cfg = st.cfg.find_node(spec.node);
        if (!node_cfg) return caf::make_message(std::string("unknown node '" + spec.node + "'"), caf::actor{});
        auto& n = st.nodes[spec.node];
        if (n.state != "ALIVE" || !n.ready)
          return caf::make_message(std::string("node '" + spec.node + "' is " + n.state), caf::actor{});
        int used = 0;
        for (auto g : spec.groups) {
          if (g < 1) return caf::make_message(std::string("group sizes must be at least 1"), caf::actor{});
          used += g;
        }
        if (spec.groups.empty() || used > node_cfg->devices.slots())
          return caf::make_message(std::string("groups use " + std::to_string(used) + " devices but node '" +
                                               spec.node + "' has " +
                                               std::to_string(node_cfg->devices.slots())),
                                   caf::actor{});
        return caf::make_message(std::string{}, n.agent);
      },
      [=](rt::status_atom) -> caf::result<std::string> {
        if (!from_head(self)) return refused();
        return status_json(self->state);
      },
      [=](rt::actors_atom) -> caf::result<std::vector<rt::actor_info>> {
        if (!from_head(self)) return refused();
        return self->state.dir.list();
      },
      [=](rt::await_atom) -> caf::result<caf::message> {
        if (!from_head(self)) return refused();
        auto rp = self->make_response_promise();
        self->state.awaiting.push_back(rp);
        answer_waiters(self);
        return rp;
      },
      [=](rt::register_atom, caf::actor supervisor) {
        if (!from_head(self)) return;
        self->state.supervisor = std::move(supervisor);
        answer_waiters(self);
      },
      [=](rt::policy_atom, const std::string& name) {
        if (!from_head(self)) return;
        self->state.policy = name;
        log_change(self, "policy", [&](rt::head_journal& j) { j.policy(name); });
      },
      [=](rt::shutdown_atom) -> caf::result<std::string> {
        if (!from_head(self)) return refused();
        auto& st = self->state;
        st.stopping = true;
        int told = 0;
        for (auto& [name, n] : st.nodes)
          if (n.state == "ALIVE" && n.agent) {
            self->demonitor(n.agent);
            self->send(n.agent, rt::shutdown_atom::value);
            ++told;
          }
        rt::log_line("head", "shutdown requested; told " + std::to_string(told) + " nodes");
        return json{{"ok", true}, {"nodes", told}}.dump();
      },
      // Sent by the endpoint once the client has its answer: now the process may end.
      [=](rt::shutdown_atom, caf::ok_atom) -> caf::result<void> {
        if (!from_head(self)) return refused();
        if (self->state.on_shutdown) self->state.on_shutdown();
        return caf::unit;
      },
  };
}

}  // namespace

caf::actor spawn_head_core(caf::actor_system& sys, const rt::cluster_config& cfg, peer_registry_ptr peers,
                           std::function<void()> on_shutdown, rt::head_journal_ptr journal) {
  return sys.spawn(head_core, cfg, std::move(peers), std::move(on_shutdown), std::move(journal));
}

}  // namespace dls::actors
