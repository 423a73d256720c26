// The supervisor: admission and placement of requests (policy::place_request), the
// active policy set of every group (`policy set`), and re-placement when a node dies. It
// is never on the per-step path: groups report load when their queue changes other than by an
// item the supervisor sent (it counts those itself), and for notes of their requests' policy
// state at most every 100 ms.
#include "actors/head_messages.hpp"
#include "actors/peer_roles.hpp"
#include "actors/spawn.hpp"
#include "policies/forecast.hpp"
#include "policies/overload.hpp"
#include "policies/placement.hpp"
#include "policies/presets.hpp"
#include "runtime/group_load.hpp"
#include "runtime/log.hpp"

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <chrono>
#include <deque>
#include <set>
#include <limits>
#include <map>
#include <optional>

namespace dls::actors {

namespace rt = dls::runtime;
using json = nlohmann::json;

namespace {

using wal_sync_atom = caf::atom_constant<caf::atom("wal_sync")>;
using wal_synced_atom = caf::atom_constant<caf::atom("wal_synced")>;

struct group_slot {
  rt::group_info info;
  // What it holds: the requests (running and queued) of its last report, plus the items sent
  // to it that had not reached it then (it sends no report per arrival from here).
  int32_t reported = 0;
  uint64_t sent = 0, arrived = 0;  // items sent to it; of those, reached it by its last report
  int held() const { return reported + static_cast<int>(sent - std::min(sent, arrived)); }
  uint64_t prompt_bytes = 0, prompt_tokens = 0;  // prompts it tokenized, as it last reported
  bool draining = false;
  // Load shedding as the group last reported it: whether it sheds, its backlog in seconds, the
  // grace in SLO windows, its lowest tau against its reference; and the requests refused here
  // on its behalf.
  bool sheds = false;
  double backlog_s = 0;
  double grace = 1;
  double lowest_tau = 1, tau_ref = 1;
  uint64_t refused_here = 0;
};

struct supervisor_state {
  caf::actor core;
  rt::engine_defaults defaults;
  std::string policy;                                  // the policy set every group runs
  std::string initial_policy;                          // the cluster file's: new groups start with it
  std::map<std::string, group_slot> groups;            // by group name
  struct placement {
    caf::actor actor;
    std::string group;   // where it was last placed ("" while pending or being re-placed)
    uint32_t epoch = 0;  // the request's epoch at that placement
    std::string key;     // the client's key, if it gave one
  };
  std::map<uint64_t, placement> requests;  // by request id
  std::deque<rt::work_item> pending;                   // accepted, waiting for a group
  // Streaming clients' requests by (client, tag), so a client can withdraw its own.
  std::map<std::pair<caf::actor_addr, uint64_t>, uint64_t> by_client;
  std::map<uint64_t, std::pair<caf::actor_addr, uint64_t>> client_of;
  uint64_t next_id = 1;
  // Recent arrivals for the reconfigurer's forecast, on this actor's clock.
  std::deque<policy::arrival_record> arrivals;
  std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();
  peer_registry_ptr peers;  // nullptr: only actors of this process are served
  rt::head_journal_ptr journal;  // nullptr: nothing is persisted
  std::map<std::string, uint64_t> by_key;  // requests in flight by the client's key
  // Accepted submits whose log record is written but not yet synced: one sync covers all
  // that arrived together, then each starts. The sync runs on the journal's thread; while it
  // does, newer submits gather for the next one.
  struct unsynced_submit {
    uint64_t id;
    rt::submit_spec spec;
    caf::response_promise rp;
  };
  std::vector<unsynced_submit> unsynced;
  std::vector<unsynced_submit> syncing;
  bool sync_in_flight = false;
  // The path overhead per request that deadlines count (cluster_schema.hpp), set by the
  // calibration when every node has joined; requests placed before count none.
  double slo_request_overhead_ms = 0;
  static inline const char* name = "dls.supervisor";
};

using sup_ptr = caf::stateful_actor<supervisor_state>*;

void place(sup_ptr self, rt::work_item item, const std::string& target = {});

constexpr auto pending_limit = std::chrono::seconds(120);

// Arrivals kept for the forecast's length mix: enough for a stable mix of 16 classes, small
// enough to send every reconfiguration interval.
constexpr std::size_t arrivals_kept = 4096;

// The tokens per prompt byte the groups measured while tokenizing (1 until they report any):
// the head keeps its arrivals' prompt lengths in bytes, and the forecast wants tokens.
double tokens_per_prompt_byte(const supervisor_state& st) {
  uint64_t bytes = 0, tokens = 0;
  for (const auto& [name, g] : st.groups) {
    bytes += g.prompt_bytes;
    tokens += g.prompt_tokens;
  }
  return bytes > 0 ? static_cast<double>(tokens) / static_cast<double>(bytes) : 1.0;
}

group_slot* pick_group(supervisor_state& st) {
  std::vector<policy::placement_view> views;
  std::vector<group_slot*> slots;
  for (auto& [name, g] : st.groups) {
    views.push_back({g.info.degree, g.held(), g.draining});
    slots.push_back(&g);
  }
  const int i = policy::place_request(views);
  return i < 0 ? nullptr : slots[static_cast<std::size_t>(i)];
}

void flush_pending(sup_ptr self) {
  auto items = std::move(self->state.pending);
  self->state.pending.clear();
  for (auto& item : items) place(self, std::move(item));
}

void place(sup_ptr self, rt::work_item item, const std::string& target) {
  auto& st = self->state;
  group_slot* g = nullptr;
  // A migration names its destination; if that group is gone or draining, placement decides.
  if (auto t = st.groups.find(target); !target.empty() && t != st.groups.end() && !t->second.draining)
    g = &t->second;
  else
    g = pick_group(st);
  item.slo_request_overhead_ms = st.slo_request_overhead_ms;
  if (!g) {
    // Accepted work waits for a group (a node may be joining or regrouping), but not
    // forever: after pending_limit it ends with an explicit error.
    self->delayed_send(self, pending_limit, rt::check_atom::value, item.request_id, item.epoch);
    st.pending.push_back(std::move(item));
    return;
  }
  g->sent += 1;
  st.requests[item.request_id].group = g->info.name;
  st.requests[item.request_id].epoch = item.epoch;
  // No answer is awaited: a drained group sends the item back, a group that refuses it fails
  // the request, and a group that ends takes the re-placement path of its requests
  // (group_ended). The request actor hears where it went from here, not from the group, and
  // before the group has the request: it takes messages about it from that group's process only.
  auto request = item.request;
  const auto epoch = item.epoch;
  if (request) self->send(request, rt::placed_atom::value, epoch, g->info.node, g->info.name, g->info.handle);
  self->send(g->info.handle, rt::enqueue_atom::value, std::move(item));
}

// A group ended. A regroup retires groups with user_shutdown after handing their requests over;
// any other end (crash, lost connection) re-places what was placed there, each request from
// its last snapshot. Its node's death, if that is the cause, may come first or later: the
// request's epoch makes the second notice a no-op.
void group_ended(sup_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  auto g = std::find_if(st.groups.begin(), st.groups.end(),
                        [&](const auto& kv) { return kv.second.info.handle.address() == dm.source; });
  if (g == st.groups.end()) return;
  const auto name = g->first;
  st.groups.erase(g);
  if (dm.reason == caf::exit_reason::user_shutdown) return;
  int moved = 0;
  const auto why = "group " + name + " ended (" + to_string(dm.reason) + ")";
  for (auto& [id, r] : st.requests)
    if (r.group == name && r.actor) {
      self->send(r.actor, rt::replace_atom::value, r.epoch, why);
      r.group.clear();
      ++moved;
    }
  rt::log_line("supervisor", why + "; re-placing " + std::to_string(moved) + " requests");
}

// Under overload a request with an SLO is refused here, before the head spends a request
// actor, directory updates and a trip to the node on it; only once the group's controller has
// lowered tau (tau first), and only what the group would refuse too.
std::optional<rt::answer> refusal_at_placement(supervisor_state& st, const rt::submit_spec& spec) {
  auto* g = spec.slo_ms > 0 ? pick_group(st) : nullptr;
  if (!g || !g->sheds || g->lowest_tau >= g->tau_ref) return std::nullopt;
  auto why = policy::refuse_at_placement(g->backlog_s, spec.slo_ms / 1e3, g->grace);
  if (why.empty()) return std::nullopt;
  ++g->refused_here;
  char tau[16];
  std::snprintf(tau, sizeof tau, "%.2f", g->lowest_tau);
  rt::answer a;
  a.error = std::string(rt::overloaded_error) + "group " + g->info.name + " already at tau " + tau +
            " (refused at placement): " + why;
  a.tag = spec.tag;
  a.group = g->info.name;
  return a;
}

// Everything but load reports comes from the head's own actors (endpoint, request actors,
// core, reconfigurer); load reports come from TP groups on authenticated nodes.
bool local(sup_ptr self) { return sender_is_local(self, "supervisor"); }

bool from_node(sup_ptr self) {
  return sender_is_local(self) || (self->state.peers && sender_may(self, *self->state.peers, role_node, "supervisor"));
}

// The request in flight under a client's key, when the head knows it.
caf::actor live_by_key(sup_ptr self, const std::string& key) {
  auto& st = self->state;
  if (key.empty()) return nullptr;
  auto it = st.by_key.find(key);
  if (it == st.by_key.end()) return nullptr;
  auto r = st.requests.find(it->second);
  return r == st.requests.end() ? nullptr : r->second.actor;
}

// Requests a restarted head found in its log: each resumes from its last canvas once a group
// is available (they wait in the pending queue like any request).
void resume_recovered(sup_ptr self) {
  auto& st = self->state;
  if (!st.journal) return;
  const auto& rec = st.journal->recovered();
  st.next_id = std::max(st.next_id, rec.next_id);
  for (const auto& [id, r] : rec.live) {
    auto started = spawn_request(self->system(), id, r.spec, st.defaults, st.core,
                                 caf::actor_cast<caf::actor>(self), st.peers, st.journal, &r);
    st.requests[id] = {started.actor, "", 0, r.key};
    if (!r.key.empty()) st.by_key[r.key] = id;
    place(self, std::move(started.first_item));
  }
  if (!rec.live.empty())
    rt::log_line("supervisor", "resuming " + std::to_string(rec.live.size()) +
                                   " requests from the log (each from its last canvas, or its prompt)");
}

// Starts an accepted (and, with a journal, logged) request; its actor answers the client.
// `await_answer` hands the client's await to the new actor before its first item leaves: a
// small request can be decoded and answered within the time this thread is descheduled
// between the two, and an await that reaches a request actor that already quit comes back to
// the client as request_receiver_down.
template <class AwaitAnswer>
auto start_request(sup_ptr self, uint64_t id, rt::submit_spec spec, AwaitAnswer await_answer) {
  auto& st = self->state;
  auto key = spec.key;
  if (!key.empty()) st.by_key[key] = id;
  if (spec.client) {
    std::pair<caf::actor_addr, uint64_t> client_key{spec.client.address(), spec.tag};
    st.by_client[client_key] = id;
    st.client_of[id] = client_key;
  }
  // The head does not tokenize: the prompt's bytes are kept, and the reconfigurer gets them as
  // tokens at the ratio the groups measured (tokens_per_prompt_byte).
  st.arrivals.push_back({std::chrono::duration<double>(std::chrono::steady_clock::now() - st.epoch).count(),
                         static_cast<int>(spec.prompt.size()),
                         spec.gen_length > 0 ? spec.gen_length : st.defaults.decode.gen_length});
  if (st.arrivals.size() > arrivals_kept) st.arrivals.pop_front();
  auto started = spawn_request(self->system(), id, std::move(spec), st.defaults, st.core,
                               caf::actor_cast<caf::actor>(self), st.peers, st.journal);
  st.requests[id] = {started.actor, "", 0, key};
  auto awaited = await_answer(started.actor);
  place(self, std::move(started.first_item));
  return awaited;
}

// The calibration of the path overhead per request: lone probe requests, one after another,
// each one block on a digits prompt that any tokenizer encodes. Each one's overhead is its
// latency at the head less its time on the group (the engine's part, which the profile
// predicts, whatever the prompt makes of it). The figure is the least of them: what the path
// costs with nothing in its way, as the idle per-step overhead is the least of its round trips.
// Right after startup the processes are still settling, and the others vary from start to start
// by several times (docs/runtime.md, "Deadlines").
// Each probe commits its whole block in one step (quota rule, one step a block), so that a large
// model on a slow device pays one step per probe. That rule does not read tau, so the probe runs
// at the reference tau and spends none of its group's accuracy budget, as a tau of 0 would. Past
// the budget no further probe starts, and the least of those that ran is the figure.
constexpr int slo_probes = 7;
constexpr auto slo_probe_budget = std::chrono::seconds(5);    // the probes' share of `up`
constexpr auto slo_probe_timeout = std::chrono::seconds(60);  // one step on the slowest engine we run
constexpr int32_t probe_slo_ms = 3600000;                      // an hour

struct slo_calibration {
  std::vector<double> overhead_ms;
  caf::response_promise rp;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

void settle_calibration(sup_ptr self, const std::shared_ptr<slo_calibration>& cal, double ms, const std::string& how) {
  auto& st = self->state;
  st.slo_request_overhead_ms = ms;
  if (st.journal) {
    try {
      st.journal->slo_overhead(ms);
    } catch (const std::exception& e) {
      rt::log_line("supervisor", std::string("cannot log the SLO's path overhead: ") + e.what());
    }
  }
  char line[160];
  std::snprintf(line, sizeof line, "deadlines count %.3f ms of path overhead per request (%s)", ms, how.c_str());
  rt::log_line("supervisor", line);
  cal->rp.deliver(ms);
}

void probe_once(sup_ptr self, std::shared_ptr<slo_calibration> cal) {
  auto& st = self->state;
  rt::submit_spec spec;
  spec.prompt = "0123456789=";
  spec.gen_length = st.defaults.decode.block_length;
  // Lax, so that no group refuses it (on_miss: reject, on_overload: refuse), and with a window
  // of its own, which the figure being measured cannot change.
  spec.slo_ms = probe_slo_ms;
  spec.rule = static_cast<int32_t>(common::commit_rule::quota);
  spec.steps_per_block = 1;
  const auto id = st.next_id++;
  auto started = spawn_request(self->system(), id, std::move(spec), st.defaults, st.core,
                               caf::actor_cast<caf::actor>(self), st.peers, nullptr, nullptr, /*listed*/ false);
  st.requests[id] = {started.actor, "", 0, ""};
  self->request(started.actor, slo_probe_timeout, rt::await_atom::value)
      .then(
          [=](const rt::answer& a) {
            if (!a.ok) return settle_calibration(self, cal, 0, "a probe failed, so none: " + a.error);
            cal->overhead_ms.push_back(std::max(0.0, a.latency_ms - a.group_ms));
            if (static_cast<int>(cal->overhead_ms.size()) < slo_probes &&
                std::chrono::steady_clock::now() - cal->started < slo_probe_budget)
              return probe_once(self, cal);
            auto v = cal->overhead_ms;
            std::sort(v.begin(), v.end());
            std::string all;
            for (double x : v) {
              char one[24];
              std::snprintf(one, sizeof one, "%s%.3f", all.empty() ? "" : " ", x);
              all += one;
            }
            settle_calibration(self, cal, v.front(),
                               "the least of " + std::to_string(v.size()) + " lone probes: " + all + " ms");
          },
          [=](caf::error& e) {
            settle_calibration(self, cal, 0, "a probe got no answer, so none: " + self->system().render(e));
          });
  place(self, std::move(started.first_item));
}

rt::answer refusal_of(uint64_t id, const rt::submit_spec& spec, const std::string& why) {
  rt::answer a;
  a.request_id = id;
  a.tag = spec.tag;
  a.error = why;
  return a;
}

caf::behavior supervisor(sup_ptr self, caf::actor core, rt::engine_defaults defaults, peer_registry_ptr peers,
                         std::string policy, rt::head_journal_ptr journal) {
  self->state.peers = std::move(peers);
  self->state.core = std::move(core);
  self->state.defaults = defaults;
  self->state.initial_policy = policy;
  if (journal && !journal->recovered().policy.empty()) policy = journal->recovered().policy;
  self->state.policy = std::move(policy);
  self->state.journal = std::move(journal);
  resume_recovered(self);
  self->set_down_handler([=](caf::down_msg& dm) { group_ended(self, dm); });
  self->set_exit_handler([=](caf::exit_msg& m) {
    // Request actors are only referenced from here; take them down with us so the
    // actor system can shut down.
    for (auto& [id, r] : self->state.requests)
      if (r.actor) self->send_exit(r.actor, m.reason);
    self->state.requests.clear();
    self->quit(m.reason);
  });
  return {
      [=](rt::submit_atom, rt::submit_spec& spec) -> caf::result<caf::message> {
        if (!local(self)) return caf::make_error(caf::sec::runtime_error, std::string("not authenticated"));
        // A key the head knows: re-attach the client to that request, or answer from the log.
        if (auto known = live_by_key(self, spec.key)) {
          if (spec.client) self->send(known, rt::attach_atom::value, spec.client);
          // The request may end before the await reaches it (its end is on its way here); its
          // answer is then in the log, which it writes before it quits.
          auto rp = self->make_response_promise();
          self->request(known, caf::infinite, rt::await_atom::value)
              .then([rp, tag = spec.tag](rt::answer& a) mutable {
                      a.tag = tag;
                      rp.deliver(std::move(a));
                    },
                    [self, rp, tag = spec.tag, key = spec.key](caf::error& e) mutable {
                      auto done = self->state.journal ? self->state.journal->finished_answer(key) : std::nullopt;
                      if (!done) return rp.deliver(std::move(e));
                      done->tag = tag;
                      rp.deliver(std::move(*done));
                    });
          return rp;
        }
        if (self->state.journal && !spec.key.empty())
          if (auto done = self->state.journal->finished_answer(spec.key)) {
            done->tag = spec.tag;
            return caf::make_message(std::move(*done));
          }
        // Under overload a request with an SLO is refused here, before the head spends a
        // request actor, a log record, directory updates and a trip to the node on it; only once
        // the group's controller has lowered tau (tau first), and only what the group would refuse too.
        if (auto refused = refusal_at_placement(self->state, spec)) return caf::make_message(std::move(*refused));
        auto& st = self->state;
        auto id = st.next_id++;
        // The request actor answers the client itself, at the very end.
        if (!st.journal)
          return start_request(self, id, std::move(spec),
                               [&](const caf::actor& r) { return self->delegate(r, rt::await_atom::value); });
        for (const auto* batch : {&st.unsynced, &st.syncing})
          for (const auto& u : *batch)
            if (!spec.key.empty() && u.spec.key == spec.key)
              return caf::make_message(
                  refusal_of(0, spec, "a request with this key is being accepted; submit it again"));
        // On disk before anything else happens to it: from the sync on, a head restart resumes it.
        rt::journal_request entry;
        entry.id = id;
        entry.key = spec.key;
        entry.spec = spec;
        entry.arrival_unix_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
                .count();
        try {
          st.journal->accepted(entry, false);
        } catch (const std::exception& e) {
          return caf::make_message(refusal_of(id, spec, std::string("the head cannot persist the request: ") + e.what()));
        }
        // The sync waits behind the submits already in the mailbox, so one covers them all.
        if (st.unsynced.empty() && !st.sync_in_flight) self->send(self, wal_sync_atom::value);
        auto rp = self->make_response_promise();
        st.unsynced.push_back({id, std::move(spec), rp});
        return rp;
      },
      [=](wal_sync_atom) {
        if (!local(self)) return;
        auto& st = self->state;
        if (st.sync_in_flight || st.unsynced.empty()) return;
        st.syncing = std::move(st.unsynced);
        st.unsynced.clear();
        st.sync_in_flight = true;
        auto me = caf::actor_cast<caf::weak_actor_ptr>(self->ctrl());
        st.journal->sync_later([me](const std::string& error) {
          // From the journal's thread, sent as the supervisor itself: it serves only local senders.
          if (auto strong = caf::actor_cast<caf::actor>(me.lock()))
            caf::send_as(strong, strong, wal_synced_atom::value, error);
        });
      },
      [=](wal_synced_atom, const std::string& error) {
        if (!local(self)) return;
        auto& st = self->state;
        auto batch = std::move(st.syncing);
        st.syncing.clear();
        st.sync_in_flight = false;
        const std::string failure = error.empty() ? "" : "the head cannot persist the request: " + error;
        for (auto& u : batch) {
          if (!failure.empty()) {
            auto a = refusal_of(u.id, u.spec, failure);
            try {
              st.journal->finished(u.id, a);  // so that a restarted head does not run it either
            } catch (const std::exception&) {
            }
            u.rp.deliver(a);
            continue;
          }
          start_request(self, u.id, std::move(u.spec),
                        [&](const caf::actor& r) { return u.rp.delegate(r, rt::await_atom::value); });
        }
        if (!st.unsynced.empty()) self->send(self, wal_sync_atom::value);
      },
      // Every node has joined (the core asks once per head process): measure the path
      // overhead, unless the cluster file fixes it or the log kept the one measured before
      // this head restarted.
      [=](rt::calibrate_atom, double configured_ms) -> caf::result<caf::message> {
        if (!local(self)) return caf::make_error(caf::sec::runtime_error, std::string("not authenticated"));
        auto cal = std::make_shared<slo_calibration>();
        cal->rp = self->make_response_promise();
        const auto& st = self->state;
        if (configured_ms >= 0)
          settle_calibration(self, cal, configured_ms, "scheduler.slo_request_overhead_ms");
        else if (st.journal && st.journal->recovered().slo_request_overhead_ms >= 0)
          settle_calibration(self, cal, st.journal->recovered().slo_request_overhead_ms, "measured before the restart");
        else
          probe_once(self, cal);
        return cal->rp;
      },
      [=](rt::enqueue_atom, rt::work_item& item) {
        if (!local(self)) return;
        self->state.requests[item.request_id].actor = item.request;
        place(self, std::move(item));
      },
      // A drained group (about to be replaced by a regroup) did not take the item: place it again.
      [=](rt::drain_atom, rt::work_item& item) {
        if (!from_node(self)) return;
        auto& st = self->state;
        auto r = st.requests.find(item.request_id);
        if (r == st.requests.end() || r->second.epoch != item.epoch || !r->second.actor) return;
        item.request = r->second.actor;  // the one the head knows, not what the node sent back
        place(self, std::move(item));
      },
      // A migrating request resumes on the group its migration chose.
      [=](rt::enqueue_atom, rt::work_item& item, const std::string& target) {
        if (!local(self)) return;
        self->state.requests[item.request_id].actor = item.request;
        place(self, std::move(item), target);
      },
      // Move request `id` to group `to` (the endpoint checked the admin token, or the migration
      // planner decided it): the order goes to the group it runs on, which answers.
      [=](rt::migrate_atom, uint64_t id, const std::string& to, const std::string& at,
          const std::string& reason) -> caf::result<std::string> {
        if (!local(self)) return caf::make_error(caf::sec::runtime_error, std::string("not authenticated"));
        auto& st = self->state;
        auto fail = [](const std::string& why) { return json{{"ok", false}, {"error", why}}.dump(); };
        auto r = st.requests.find(id);
        if (r == st.requests.end()) return fail("no request " + std::to_string(id) + " in flight");
        auto from = st.groups.find(r->second.group);
        if (r->second.group.empty() || from == st.groups.end())
          return fail("request " + std::to_string(id) + " is not on a group now (waiting or moving)");
        // From here on a refusal also says where the request runs.
        auto refuse = [&](const std::string& why) {
          return json{{"ok", false}, {"error", why}, {"from", from->first}}.dump();
        };
        auto dst = st.groups.find(to);
        if (dst == st.groups.end()) {
          std::string list;
          for (const auto& [name, g] : st.groups) list += (list.empty() ? "" : ", ") + name;
          return refuse("no TP group '" + to + "' (live: " + list + ")");
        }
        if (dst->second.draining) return refuse("TP group '" + to + "' is being regrouped");
        if (from == dst) return refuse("request " + std::to_string(id) + " already runs on " + to);
        if (at != "any" && at != "boundary" && at != "mid-block")
          return refuse("unknown step boundary '" + at + "' (any, boundary, mid-block)");
        // Answered here, not by the group: a group busy with a step (or a node paused) must not
        // hold the caller. A request that finishes before its boundary simply does not move.
        self->send(from->second.info.handle, rt::migrate_atom::value,
                   rt::migration_order{id, to, dst->second.info.handle, dst->second.info.degree, at, reason});
        return json{{"ok", true}, {"request", id}, {"from", from->first}, {"to", to}, {"at", at}}.dump();
      },
      // The migration planner's list of groups and the policy they run.
      [=](rt::groups_atom) -> caf::result<std::vector<rt::group_info>, std::string> {
        if (!local(self)) return caf::make_error(caf::sec::runtime_error, std::string("not authenticated"));
        std::vector<rt::group_info> out;
        for (const auto& [name, g] : self->state.groups)
          if (!g.draining) out.push_back(g.info);
        return {std::move(out), self->state.policy};
      },
      [=](rt::placed_atom, uint64_t id, const std::string& group) {
        if (!local(self)) return;
        auto it = self->state.requests.find(id);
        if (it != self->state.requests.end()) it->second.group = group;
      },
      [=](rt::finished_atom, uint64_t id) {
        if (!local(self)) return;
        auto& st = self->state;
        if (auto r = st.requests.find(id); r != st.requests.end()) {
          if (!r->second.key.empty()) st.by_key.erase(r->second.key);
          st.requests.erase(r);
        }
        if (auto it = st.client_of.find(id); it != st.client_of.end()) {
          st.by_client.erase(it->second);
          st.client_of.erase(it);
        }
      },
      // From the endpoint, on behalf of `client` (the endpoint checked who sent it).
      [=](rt::cancel_atom, const caf::actor& client, uint64_t tag) {
        if (!local(self)) return;
        auto& st = self->state;
        auto it = st.by_client.find({client.address(), tag});
        if (it == st.by_client.end()) return;  // already finished
        auto id = it->second;
        auto& pending = st.pending;
        pending.erase(std::remove_if(pending.begin(), pending.end(),
                                     [&](const rt::work_item& w) { return w.request_id == id; }),
                      pending.end());
        if (auto r = st.requests.find(id); r != st.requests.end()) {
          // Its group hears it from here too: an admission still on its way there (the
          // request actor does not know that group yet) arrives first and is dropped.
          if (auto g = st.groups.find(r->second.group); g != st.groups.end())
            self->send(g->second.info.handle, rt::cancel_atom::value, id);
          if (r->second.actor) self->send(r->second.actor, rt::cancel_atom::value);
        }
      },
      [=](rt::load_atom, const std::string& group, rt::group_load& load) {
        if (!from_node(self)) return;
        auto it = self->state.groups.find(group);
        if (it == self->state.groups.end()) return;
        for (const auto& e : load.progress)
          if (auto r = self->state.requests.find(e.request_id); r != self->state.requests.end() && r->second.actor)
            self->send(r->second.actor, rt::progress_atom::value, e.epoch, e.progress);
        auto& g = it->second;
        g.reported = load.queued;
        g.arrived = load.enqueued;
        g.prompt_bytes = load.prompt_bytes;
        g.prompt_tokens = load.prompt_tokens;
        g.sheds = load.sheds;
        g.backlog_s = load.backlog_s;
        g.grace = load.shed_grace;
        g.lowest_tau = load.lowest_tau;
        g.tau_ref = load.tau_ref;
        // Moved, not copied: the report is this handler's, and the directory keeps it whole.
        load.progress.clear();
        group_details details{std::move(load), g.info.degree, g.info.devices, g.refused_here};
        self->send(self->state.core, group_row_atom::value, g.info.id, std::move(details));
      },
      [=](rt::groups_atom, const std::string& node, std::vector<rt::group_info>& groups) {
        if (!local(self)) return;
        auto& st = self->state;
        std::map<caf::actor_addr, group_slot> kept;  // a group that stays keeps its counts
        for (auto it = st.groups.begin(); it != st.groups.end();) {
          if (it->second.info.node != node) {
            ++it;
            continue;
          }
          kept[it->second.info.handle.address()] = it->second;
          self->demonitor(it->second.info.handle);
          it = st.groups.erase(it);
        }
        for (auto& g : groups) {
          group_slot slot;
          slot.info = g;
          if (auto k = kept.find(g.handle.address()); k != kept.end()) {
            slot.reported = k->second.reported;
            slot.sent = k->second.sent;
            slot.arrived = k->second.arrived;
          }
          st.groups[g.name] = slot;
          self->monitor(g.handle);
          // A group starts with the policy of the cluster file; tell it if `policy set` changed it.
          if (st.policy != st.initial_policy) self->send(g.handle, rt::policy_atom::value, st.policy);
        }
        rt::log_line("supervisor", "node '" + node + "' now has " + std::to_string(groups.size()) + " groups");
        flush_pending(self);
      },
      // `policy set NAME` (through the endpoint, which checked the admin token): every group
      // decides with NAME from its next step on.
      [=](rt::policy_atom, const std::string& name) -> caf::result<std::string> {
        if (!local(self)) return caf::make_error(caf::sec::runtime_error, std::string("not authenticated"));
        auto& st = self->state;
        try {
          policy::make_policy_set(name);
        } catch (const std::invalid_argument&) {
          std::string list;
          for (const auto& n : policy::policy_set_names()) list += (list.empty() ? "" : ", ") + n;
          return json{{"ok", false}, {"error", "unknown policy '" + name + "' (known: " + list + ")"}}.dump();
        }
        auto before = st.policy;
        st.policy = name;
        for (auto& [gname, g] : st.groups) self->send(g.info.handle, rt::policy_atom::value, name);
        self->send(st.core, rt::policy_atom::value, name);
        rt::log_line("supervisor", "policy " + before + " -> " + name + " on " + std::to_string(st.groups.size()) +
                                       " groups");
        return json{{"ok", true}, {"policy", name}, {"previous", before}, {"groups", st.groups.size()}}.dump();
      },
      // The reconfigurer's view of the load, [now, t, prompt, gen, t, prompt, gen, ...], the
      // policy set the groups run (it regroups only for a set with reconfiguration, as the
      // simulator does), the requests each node's groups hold (it drains the emptiest first) and
      // the path overhead per request that deadlines count (ms; the optimizer plans with it).
      [=](rt::load_atom) -> caf::result<std::vector<double>, std::string, std::map<std::string, int32_t>, double> {
        if (!local(self)) return caf::make_error(caf::sec::runtime_error, std::string("not authenticated"));
        auto& st = self->state;
        std::vector<double> out{std::chrono::duration<double>(std::chrono::steady_clock::now() - st.epoch).count()};
        const double per_byte = tokens_per_prompt_byte(st);
        for (const auto& a : st.arrivals) {
          out.push_back(a.t_s);
          out.push_back(std::round(a.prompt_len * per_byte));
          out.push_back(a.gen_len);
        }
        std::map<std::string, int32_t> held;
        for (const auto& [name, g] : st.groups) held[g.info.node] += g.held();
        return {std::move(out), st.policy, std::move(held), st.slo_request_overhead_ms};
      },
      [=](rt::drain_atom, const std::string& node) -> caf::result<bool> {
        if (!local(self)) return caf::make_error(caf::sec::runtime_error, std::string("not authenticated"));
        for (auto& [name, g] : self->state.groups)
          if (g.info.node == node) g.draining = true;
        return true;
      },
      // A regroup that failed half-way: place on the node's current groups again.
      [=](rt::drain_atom, const std::string& node, bool draining) {
        if (!local(self)) return;
        for (auto& [name, g] : self->state.groups)
          if (g.info.node == node) g.draining = draining;
        flush_pending(self);
      },
      [=](rt::check_atom, uint64_t id, uint32_t epoch) {
        if (!local(self)) return;
        auto& pending = self->state.pending;
        auto it = std::find_if(pending.begin(), pending.end(),
                               [&](const rt::work_item& w) { return w.request_id == id && w.epoch == epoch; });
        if (it == pending.end()) return;
        self->send(it->request, rt::failed_atom::value, epoch,
                   std::string("no live TP group for ") + std::to_string(pending_limit.count()) + " s");
        pending.erase(it);
      },
      [=](rt::node_dead_atom, const std::string& node) {
        if (!local(self)) return;
        auto& st = self->state;
        std::set<std::string> lost;
        for (auto it = st.groups.begin(); it != st.groups.end();) {
          if (it->second.info.node == node) {
            lost.insert(it->first);
            it = st.groups.erase(it);
          } else {
            ++it;
          }
        }
        int moved = 0;
        // The epoch tells the request which of its placements died: one it already left
        // (it re-placed itself when its group's down message came first) needs nothing.
        for (auto& [id, r] : st.requests)
          if (lost.count(r.group) && r.actor) {
            self->send(r.actor, rt::replace_atom::value, node, r.epoch);
            r.group.clear();
            ++moved;
          }
        rt::log_line("supervisor", "node '" + node + "' lost " + std::to_string(lost.size()) + " groups; re-placing " +
                                       std::to_string(moved) + " requests from their last canvas");
      },
  };
}

}  // namespace

caf::actor spawn_supervisor(caf::actor_system& sys, caf::actor core, rt::engine_defaults defaults,
                            peer_registry_ptr peers, std::string policy, rt::head_journal_ptr journal) {
  return sys.spawn(supervisor, std::move(core), defaults, std::move(peers), std::move(policy), std::move(journal));
}

}  // namespace dls::actors
