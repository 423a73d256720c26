// A TP group runs the step loop over its queue. Before each step it asks the policies
// (policy::decide_step, through the snapshot adapter of policy_view.hpp) which queued
// requests to admit, every request's tau and which requests step now; the step goes with
// those taus to all k workers at once. They compute their shards in lockstep through the
// shared-memory all-reduce and end with identical canvases, so rank 0's outcome is the
// group's. The group then streams finished blocks, snapshots canvases at refresh
// boundaries, and answers. This file holds the actor's behaviour; tp_group_state.hpp has its
// state and lists the files that hold the rest.
#include "actors/tp_group_state.hpp"

#include "actors/peer_roles.hpp"
#include "gpu/canvas.hpp"
#include "policies/presets.hpp"
#include "runtime/log.hpp"

#include <algorithm>
#include <cstdlib>

namespace dls::actors {

namespace tp_group_impl {
namespace {

// DILASERVE_DECISION_LOG writes one decision in this many by default: a record holds every
// request of the group (a few hundred bytes each), so logging them all would write megabytes a
// second under load.
constexpr int decision_log_every = 10;

void set_policy(group_state& st, const std::string& name) {
  st.policy = policy::make_group_policy(policy::make_policy_set(name), st.setup.policy->knobs);
  st.ledger.restart();
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
        enqueue(self, item);
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
}  // namespace tp_group_impl

caf::actor spawn_tp_group(caf::actor_system& sys, group_setup setup) {
  return sys.spawn(tp_group_impl::tp_group, std::move(setup));
}

}  // namespace dls::actors
