// Draining a TP group for a regroup: requests at their refresh boundary go back to the
// supervisor as canvases, the rest once they reach theirs.
#include "actors/tp_group_state.hpp"

#include <algorithm>

namespace dls::actors::tp_group_impl {

namespace {

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

}  // namespace

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

}  // namespace dls::actors::tp_group_impl
