// Migrations out of a TP group at the step boundary they wait for, and into it: by canvas, by
// hand-over within the process, or with the KV cache over UCX (tp_group_kv.cpp).
#include "actors/tp_group_state.hpp"

#include "runtime/log.hpp"

#include <algorithm>
#include <random>

namespace dls::actors::tp_group_impl {

namespace {

// Migration downtimes kept per kind for `status` (and bench-migration's live figures): enough
// for a p99 over the last few hundred moves, a few KB in every load report.
constexpr std::size_t downtime_samples = 256;

// Whether a request with a migration order is at the step boundary the order waits for.
bool ready_to_leave(const queued_request& q) {
  // "boundary" and "mid-block" wait for the request's first step: before it, moving it is
  // moving its prompt.
  const auto& at = q.leave->at;
  const bool refresh_next = q.live.progress.next_refresh;
  if (at == "boundary") return q.steps > 0 && refresh_next;
  if (at == "mid-block") return q.steps > 0 && !refresh_next;
  return true;
}

// The move of one request that has left this group's queue: every rank gives its slot up
// (by ownership). Mid-block to a group of this process with the same degree the slots move
// on as they are (no copy, nothing recomputed); otherwise the request actor gets the canvas,
// and mid-block also the canvas of its last refresh (from which the destination can rebuild the
// KV cache exactly) and, when send_kv sent the cache over UCX, its transfer ids.
void depart(group_ptr self, queued_request q) {
  auto& st = self->state;
  const auto order = *q.leave;
  const bool mid_block = !q.live.progress.next_refresh;
  const bool same_process = order.to_handle && order.to_handle.node() == self->node();
  const bool handover = mid_block && same_process && order.to_degree == static_cast<int32_t>(st.setup.workers.size());
  const bool kv_candidate = mid_block && !handover && st.setup.ucx && st.setup.ucx->config().kv_move != "rebuild";
  const bool ask_address = kv_candidate && !same_process && st.setup.head;
  const auto k = st.setup.workers.size();
  auto held = std::make_shared<std::vector<held_slot_ptr>>(k);
  auto left = std::make_shared<std::size_t>(k + (ask_address ? 1 : 0));
  auto failed = std::make_shared<std::string>();
  auto peer = std::make_shared<std::string>(kv_candidate && same_process ? st.setup.ucx->address() : "");
  auto peer_error = std::make_shared<std::string>(kv_candidate && !ask_address && !same_process
                                                      ? "no head to ask for the address"
                                                      : "");
  auto meta = meta_now(st, q);
  meta.moved_at_us = unix_now_us();  // "stop": it takes no step here any more
  auto moved = std::make_shared<queued_request>(std::move(q));
  auto via_request_actor = [=](const std::string& why_not_handover) {
    auto& st = self->state;
    const auto& rank0 = (*held)[0];
    rt::migration_handoff h{st.setup.name, order.to, "canvas", order.reason, static_cast<int32_t>(moved->steps),
                            {}, {}, {}, meta.moved_at_us, meta.tau_low};
    auto bytes = rank0->slot.c.to_bytes();
    h.canvas.assign(bytes.begin(), bytes.end());
    if (!rank0->slot.c.at_refresh_boundary()) {
      if (!rank0->refresh_input) {
        self->send(meta.request, rt::failed_atom::value, meta.epoch,
                   std::string("lost during migration: no canvas of its last refresh"));
        return;
      }
      auto kv = rank0->refresh_input->to_bytes();
      h.kv_canvas.assign(kv.begin(), kv.end());
      h.how = "rebuild";
      if (kv_candidate) {
        std::string decided = " (ucx.kv_move: transfer)";
        const auto why_not = send_kv(self, order, *held, *peer, *peer_error, h, decided);
        rt::log_line(st.setup.name, "request " + std::to_string(meta.request_id) + " to " + order.to + " mid-block: " +
                                        (why_not.empty() ? "KV cache sent over UCX" + decided
                                                         : "KV cache rebuilt there, " + why_not));
      }
    }
    if (!why_not_handover.empty()) h.reason += " (" + why_not_handover + ")";
    st.migrations_out += 1;
    self->send(meta.request, rt::migrate_atom::value, meta.epoch, h);
    // For the security test (docs/runtime.md, "Security"): the groups of the node that
    // DILASERVE_ANSWER_FAULT names then answer for the request at its next placement, elsewhere,
    // as a compromised node would.
    if (env_names_node_of("DILASERVE_ANSWER_FAULT", st.setup.name)) {
      rt::run_result forged;
      forged.text = "FORGED by " + st.setup.name;
      forged.node = st.setup.node;
      forged.group = st.setup.name;
      self->send(meta.request, rt::finished_atom::value, meta.epoch + 1, forged);
    }
    report_load(self);
  };
  auto all_released = [=] {
    auto& st = self->state;
    if (!failed->empty()) {
      self->send(meta.request, rt::failed_atom::value, meta.epoch, "lost during migration: " + *failed);
      return;
    }
    if (!handover) {
      via_request_actor("");
      return;
    }
    group_handover h;
    h.meta = meta;
    h.slots = *held;
    h.progress = moved->live.progress;
    h.committed = moved->committed;
    h.steps = moved->steps;
    h.text = std::move(moved->text);
    h.streamed_blocks = moved->streamed_blocks;
    h.from = st.setup.name;
    self->request(order.to_handle, std::chrono::seconds(10), handover_atom::value, std::move(h))
        .then(
            [=](bool) {
              auto& st = self->state;
              st.migrations_out += 1;
              rt::migration_handoff note{st.setup.name, order.to, "handover", order.reason,
                                         static_cast<int32_t>(moved->steps), {}, {}, {}, meta.moved_at_us};
              self->send(meta.request, rt::migrate_atom::value, meta.epoch, note);
              report_load(self);
            },
            // The destination went away: the request goes on from its canvas through its actor.
            [=](caf::error& e) { via_request_actor("hand-over refused: " + to_string(e)); });
  };
  // The destination's address is asked for while the ranks let go.
  if (ask_address)
    self->request(st.setup.head, std::chrono::seconds(10), rt::ucx_atom::value, node_of_group(order.to))
        .then(
            [=](std::string& address) {
              *peer = std::move(address);
              if (--*left == 0) all_released();
            },
            [=](caf::error& e) {
              *peer_error = to_string(e);
              if (--*left == 0) all_released();
            });
  for (std::size_t r = 0; r < k; ++r)
    self->request(st.setup.workers[r], step_timeout, release_atom::value, moved->meta.request_id)
        .then(
            [=](held_slot_ptr& p) {
              (*held)[r] = std::move(p);
              if (--*left == 0) all_released();
            },
            [=](caf::error& e) {
              if (failed->empty()) *failed = to_string(e);
              if (--*left == 0) all_released();
            });
}

}  // namespace

// A migrated request's first step here ended: the move's downtime, on the system clock both
// processes share when they run on one host (across hosts it mixes two clocks).
void note_downtime(group_state& st, queued_request& q) {
  auto& list = st.downtime[q.arrived_how.empty() ? "canvas" : q.arrived_how];
  const double end_ms = static_cast<double>(unix_now_us() - q.meta.moved_at_us) / 1e3;
  list.push_back({q.live.progress.prompt_len + q.live.progress.gen_len, end_ms,
                  q.resumed_ms >= 0 ? q.resumed_ms : end_ms});
  if (list.size() > downtime_samples) list.pop_front();
  q.meta.moved_at_us = 0;
}

// `n` consecutive UCX transfer ids for this group. Ids are per receiving process; a random
// start keeps the groups of one process apart, and the top bit stays clear: it marks the
// transfers nobody awaits by id (a peer-kept snapshot).
uint64_t take_transfer_ids(group_state& st, std::size_t n) {
  if (st.next_transfer == 0) {
    std::random_device rd;
    st.next_transfer = (((uint64_t{rd()} << 32) | rd()) | 1) & ~(rt::ucx_transport::unasked_bit | (uint64_t{1} << 62));
  }
  const uint64_t first = st.next_transfer;
  st.next_transfer += n;
  return first;
}

// The node a group runs on: group names are "<node>/g<n>" and node names hold no '/'.
std::string node_of_group(const std::string& group) { return group.substr(0, group.find('/')); }

// A migrated request joins this group's queue once its workers hold it (fresh canvas,
// rebuilt cache or imported one).
void join_queue(group_ptr self, pending_kv p, const char* how) {
  auto& st = self->state;
  if (!p.item.moved_from.empty()) st.migrations_in += 1;
  auto& q = add_request(self, std::move(p.item), p.progress);
  q.arrived_how = how;
  q.text = std::move(p.text);
  q.streamed_blocks = p.progress.block;
  report_load(self);
  kick(self);
}

// Takes the requests whose migration is due out of the queue, between two steps.
void start_migrations(group_ptr self) {
  auto& st = self->state;
  std::vector<uint64_t> due;
  for (auto& [id, q] : st.queue)
    if (q.leave && ready_to_leave(q)) due.push_back(id);
  for (auto id : due) {
    auto it = st.queue.find(id);
    st.ledger.leave(view_of(it->second.live), st.setup.policy->quality);
    queued_request q = std::move(it->second);
    for (auto* list : {&st.running, &st.waiting})
      list->erase(std::remove(list->begin(), list->end(), &it->second), list->end());
    st.queue.erase(it);
    st.order.erase(std::remove(st.order.begin(), st.order.end(), id), st.order.end());
    st.dirty = true;
    note_end(st, id, "moved on");
    depart(self, std::move(q));
  }
}

}  // namespace dls::actors::tp_group_impl
