// A worker owns one device slot: its thread (a detached actor), its engine shard and
// the KV cache memory of every request it holds. Weights are shared read-only by all
// workers of the process, so regrouping never moves weights.
#include "actors/node_parts.hpp"
#include "actors/local_messages.hpp"
#include "actors/peer_roles.hpp"
#include "gpu/canvas.hpp"
#include "runtime/log.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <map>

namespace dls::actors {

namespace rt = dls::runtime;

namespace {

struct worker_state {
  std::shared_ptr<const device_pool> devices;
  int slot = 0;
  std::string who;
  int rank = 0;
  int world = 1;
  std::shared_ptr<group_link> link;
  std::unique_ptr<gpu::allreduce> endpoint;
  std::unique_ptr<gpu::engine> engine;
  std::map<uint64_t, gpu::request_slot> slots;
  // The canvas each slot's last refresh ran on: a migration mid-block without the KV cache
  // rebuilds the cache from it (a copy of the token ids per refresh).
  std::map<uint64_t, gpu::canvas> refresh_input;
  static inline const char* name = "dls.worker";
};

using worker_ptr = caf::stateful_actor<worker_state>*;

step_result run_step(worker_state& st, const step_order& order) {
  step_result out;
  std::vector<gpu::request_slot*> batch;
  for (auto id : order.ids) {
    auto it = st.slots.find(id);
    if (it == st.slots.end()) {
      out.error = st.who + ": request " + std::to_string(id) + " is not on this worker";
      return out;
    }
    batch.push_back(&it->second);
    if (!it->second.c.finished && it->second.c.at_refresh_boundary()) st.refresh_input.insert_or_assign(id, it->second.c);
  }
  if (!st.engine) {
    out.error = st.who + ": not configured";
    return out;
  }
  if (order.tau.size() == order.ids.size())
    for (std::size_t i = 0; i < batch.size(); ++i) batch[i]->c.set_threshold(order.tau[i]);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<gpu::step_report> reports;
  try {
    reports = st.engine->step(batch);
  } catch (const std::exception& e) {
    out.error = st.who + ": step failed: " + e.what();
    return out;
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (st.rank != 0) return out;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& c = batch[i]->c;
    step_outcome o;
    o.id = order.ids[i];
    o.report = reports[i];
    o.boundary = c.at_refresh_boundary();
    o.block = c.block;
    o.steps = c.steps;
    o.committed = c.committed;
    o.progress = progress_of(c);
    // A block just completed (or the answer did). Recovery resumes from the canvas of such a
    // boundary, so that is the only snapshot the head gets: one per block, not one per refresh.
    const bool block_done = c.finished || (c.step_in_block == 0 && reports[i].committed > 0);
    if (block_done) o.answer = c.answer();
    if (block_done && !c.finished && o.boundary) o.canvas = c.to_bytes();
    out.outcomes.push_back(std::move(o));
  }
  return out;
}

caf::behavior worker(worker_ptr self, std::shared_ptr<const device_pool> devices, int slot, std::string who) {
  self->state.devices = std::move(devices);
  self->state.slot = slot;
  self->state.who = std::move(who);
  // A throwing handler would otherwise end the worker silently; say why in the log.
  self->set_exception_handler([=](std::exception_ptr& eptr) -> caf::error {
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      rt::log_line(self->state.who, std::string("fatal: ") + e.what());
    }
    return caf::make_error(caf::sec::runtime_error);
  });
  return {
      // A worker serves only its own TP group, which lives in the same process.
      [=](configure_atom, const shard_setup& s) {
        if (!sender_is_local(self, "worker")) return;
        auto& st = self->state;
        st.slots.clear();
        st.engine.reset();
        st.endpoint.reset();
        st.rank = s.rank;
        st.world = s.world;
        st.link = s.link;
        st.engine = std::make_unique<gpu::engine>(st.devices->make_backend(st.slot, s.rank, *s.link, st.endpoint));
      },
      [=](admit_atom, uint64_t id, const std::string& bytes) {
        if (!sender_is_local(self, "worker")) return;
        auto& st = self->state;
        // The group validated the canvas before admitting it anywhere.
        st.slots.insert_or_assign(id, st.engine->admit(gpu::canvas::from_bytes(bytes)));
        st.refresh_input.erase(id);
      },
      // A canvas that moved mid-block without its KV cache: one forward over the canvas of its
      // last refresh rebuilds the cache (every rank of the group at the same point of its
      // mailbox, so the all-reduce of that forward pairs up).
      [=](admit_atom, uint64_t id, const std::string& bytes, const std::string& kv_source) {
        if (!sender_is_local(self, "worker")) return;
        auto& st = self->state;
        auto source = gpu::canvas::from_bytes(kv_source);
        st.slots.insert_or_assign(id, st.engine->admit_rebuilt(gpu::canvas::from_bytes(bytes), source));
        st.refresh_input.insert_or_assign(id, std::move(source));
      },
      // A canvas that moved mid-block with its KV cache (this rank's shard, over UCX; the group
      // checked its shape): imported as it is, nothing recomputed. "" or why the import failed,
      // and then the group rebuilds the cache on every rank instead.
      [=](admit_atom, uint64_t id, const std::string& bytes, const std::string& kv_source,
          const rt::ucx_payload& kv) -> std::string {
        if (!sender_is_local(self, "worker")) return "not local";
        auto& st = self->state;
        auto slot = st.engine->admit(gpu::canvas::from_bytes(bytes));
        try {
          slot.cache->import_bytes(kv.view());
        } catch (const std::exception& e) {
          return st.who + ": " + e.what();
        }
        st.slots.insert_or_assign(id, std::move(slot));
        st.refresh_input.insert_or_assign(id, gpu::canvas::from_bytes(kv_source));
        return "";
      },
      // Gives a slot up for a migration, by ownership (no copy of the KV cache).
      [=](release_atom, uint64_t id) -> caf::result<held_slot_ptr> {
        if (!sender_is_local(self, "worker")) return caf::make_error(caf::sec::runtime_error, std::string("not local"));
        auto& st = self->state;
        auto it = st.slots.find(id);
        if (it == st.slots.end())
          return caf::make_error(caf::sec::runtime_error, st.who + ": request " + std::to_string(id) + " is not here");
        auto held = std::make_shared<held_slot>();
        held->slot = std::move(it->second);
        st.slots.erase(it);
        if (auto r = st.refresh_input.find(id); r != st.refresh_input.end()) {
          held->refresh_input = std::move(r->second);
          st.refresh_input.erase(r);
        }
        return held;
      },
      [=](adopt_atom, uint64_t id, const held_slot_ptr& held) {
        if (!sender_is_local(self, "worker") || !held) return;
        auto& st = self->state;
        st.slots.insert_or_assign(id, std::move(held->slot));
        if (held->refresh_input) st.refresh_input.insert_or_assign(id, std::move(*held->refresh_input));
      },
      [=](step_atom, const step_order& order) -> caf::result<step_result> {
        if (!sender_is_local(self, "worker")) return caf::make_error(caf::sec::runtime_error, std::string("not local"));
        return run_step(self->state, order);
      },
      [=](drop_atom, const step_order& order) {
        if (!sender_is_local(self, "worker")) return;
        for (auto id : order.ids) {
          self->state.slots.erase(id);
          self->state.refresh_input.erase(id);
        }
      },
      [=](evict_atom, const step_order& order) -> caf::result<canvas_bundle> {
        if (!sender_is_local(self, "worker")) return caf::make_error(caf::sec::runtime_error, std::string("not local"));
        canvas_bundle out;
        for (auto id : order.ids) {
          auto it = self->state.slots.find(id);
          if (it == self->state.slots.end()) continue;
          out.canvases.emplace_back(id, it->second.c.to_bytes());
          self->state.slots.erase(it);
          self->state.refresh_input.erase(id);
        }
        return out;
      },
  };
}

}  // namespace

caf::actor spawn_worker(caf::actor_system& sys, std::shared_ptr<const device_pool> devices, int slot, std::string who) {
  return sys.spawn<caf::detached>(worker, std::move(devices), slot, std::move(who));
}

}  // namespace dls::actors
