// A TP group's queue: requests joining it, leaving it, and their state for the next group.
#include "actors/tp_group_state.hpp"

#include "actors/peer_roles.hpp"
#include "gpu/canvas.hpp"
#include "policies/group_step.hpp"
#include "policies/threshold.hpp"
#include "runtime/log.hpp"

#include <time.h>
#include <algorithm>

namespace dls::actors::tp_group_impl {

namespace {

// Requests remembered after they left, for the reason a late migration order names: about two
// seconds of the shipped model's requests at a node's full rate (about 450 per second), 24 bytes
// each. The supervisor orders a move of a request it believes runs here, so an order comes at
// most a messaging delay (milliseconds; seconds on a starved machine) after its request left.
constexpr std::size_t recent_ends_kept = 1024;

// A request without an SLO and without a profile to derive one has no deadline: this many
// seconds stands for "never" and keeps the policies' arithmetic finite.
constexpr double no_deadline_s = 1e9;

gpu::decode_params params_for(const rt::engine_defaults& d, const rt::work_item& item) {
  gpu::decode_params p = rt::with_request(d.decode, item);
  p.threshold = item.threshold;
  return p;
}

// The answer text of a canvas's completed blocks: what its earlier groups have streamed, so a
// resumed request streams only what follows.
answer_text streamed_text_of(const gpu::tokenizer& tok, const gpu::canvas& c) {
  auto ids = c.answer();
  const auto done = static_cast<std::size_t>(std::max(0, c.block_begin() - c.prompt_len));
  if (!c.finished && ids.size() > done) ids.resize(done);
  answer_text t(tok);
  t.advance(ids);
  return t;
}

}  // namespace

int64_t unix_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double now_s(const group_state& st) {
  return std::chrono::duration<double>(clock_type::now() - st.epoch).count();
}

void note_end(group_state& st, uint64_t id, const char* how) {
  st.recent_ends.push_back({id, how, clock_type::now()});
  if (st.recent_ends.size() > recent_ends_kept) st.recent_ends.pop_front();
}

// Why an order to move request `id` finds it not queued here.
std::string why_not_queued(const group_state& st, uint64_t id) {
  if (st.draining) return "this group is being regrouped, which moves it anyway";
  if (st.pending.count(id)) return "it is still waiting here for its KV cache";
  for (auto e = st.recent_ends.rbegin(); e != st.recent_ends.rend(); ++e)
    if (e->id == id) {
      const auto ms = std::chrono::duration<double, std::milli>(clock_type::now() - e->at).count();
      return std::string("it ") + e->how + " here " + std::to_string(static_cast<int64_t>(ms)) +
             " ms before the order came";
    }
  return "no such request is queued here, nor among the last " + std::to_string(recent_ends_kept) + " to leave";
}

void remove(group_ptr self, uint64_t id, const char* how) {
  auto& st = self->state;
  note_end(st, id, how);
  auto it = st.queue.find(id);
  if (it != st.queue.end()) {
    // A finished request has nothing uncommitted left, so this releases only what one that
    // leaves early had reserved.
    st.ledger.leave(view_of(it->second.live), st.setup.policy->quality);
    for (auto* list : {&st.running, &st.waiting})
      list->erase(std::remove(list->begin(), list->end(), &it->second), list->end());
    st.queue.erase(it);
  }
  st.dirty = true;
  st.order.erase(std::remove(st.order.begin(), st.order.end(), id), st.order.end());
  step_order o{{id}};
  for (auto& w : st.setup.workers) self->send(w, drop_atom::value, o);
}

// Queues a request this group admitted on its workers (fresh, resumed or handed over).
queued_request& add_request(group_ptr self, rt::work_item item, const canvas_progress& progress) {
  auto& st = self->state;
  const auto& ctx = *st.setup.policy;
  auto id = item.request_id;
  queued_request q;
  auto& lr = q.live;
  lr.id = id;
  lr.group = st.view.id;
  lr.progress = progress;
  q.reached_s = now_s(st);
  lr.arrival_s = q.reached_s - item.age_ms / 1e3;
  if (item.deadline_ms > 0) {
    lr.deadline_s = lr.arrival_s + item.deadline_ms / 1e3;
  } else if (ctx.cost && ctx.cost->supports(1)) {
    if (!st.slo_cost || st.slo_cost_overhead_s != st.slo_overhead_s) {
      st.slo_cost = policy::with_step_overhead(*ctx.cost, 1, st.slo_overhead_s);
      st.slo_cost_overhead_s = st.slo_overhead_s;
    }
    lr.deadline_s = policy::slo_deadline_s(lr.arrival_s, ctx.slo_scale, *st.slo_cost, ctx.quality, progress.prompt_len,
                                           progress.gen_len, progress.block_len, ctx.knobs.tau_max,
                                           item.slo_request_overhead_ms / 1e3);
  } else {
    lr.deadline_s = lr.arrival_s + no_deadline_s;
  }
  lr.tau = item.threshold;
  lr.tau_pinned = tau_held(item, progress);
  lr.tau_floor = item.min_threshold;
  lr.tau_low = item.tau_low;
  lr.reject_on_miss = item.reject_on_miss;
  item.canvas.clear();
  item.kv_canvas.clear();
  q.meta = std::move(item);
  auto& slot = st.queue[id] = std::move(q);
  st.order.push_back(id);
  st.waiting.push_back(&slot);
  st.ledger.enter(view_of(slot.live), ctx.quality);
  st.dirty = true;
  return slot;
}

// The request's meta as the next group must see it: age, deadline and tau as they are now.
rt::work_item meta_now(const group_state& st, const queued_request& q) {
  auto item = q.meta;
  const auto& lr = q.live;
  item.age_ms = 1e3 * (now_s(st) - lr.arrival_s);
  item.deadline_ms = 1e3 * (lr.deadline_s - lr.arrival_s);
  item.threshold = lr.tau;
  item.tau_low = lr.tau_low;
  return item;
}

// A request placed on this group: from its prompt, from a canvas (resumed, re-placed or moved
// in at a refresh boundary), or mid-block with the canvas of its last refresh, to rebuild its KV
// cache from or to wait for the one in flight over UCX.
void enqueue(group_ptr self, rt::work_item& item) {
  // The supervisor tells the request actor where it placed it; an item from this node
  // (a regroup moving its requests) the group announces itself.
  const bool tell_placement = sender_is_local(self);
  auto& st = self->state;
  const bool from_supervisor =
      self->current_sender() == caf::actor_cast<caf::strong_actor_ptr>(st.setup.supervisor);
  if (from_supervisor) ++st.enqueued;
  // A drained group is about to be replaced: the supervisor places the item again.
  if (st.drained) {
    self->send(st.setup.supervisor, rt::drain_atom::value, std::move(item));
    return;
  }
  const auto& cfg = st.setup.model->config;
  std::string bytes;
  std::string problem;
  canvas_progress progress;
  std::string kv_bytes;
  answer_text streamed(*st.setup.tokenizer);
  try {
    gpu::canvas c;
    if (item.canvas.empty()) {
      auto prompt = st.setup.tokenizer->encode(item.prompt);
      st.prompt_bytes += item.prompt.size();
      st.prompt_tokens += prompt.size();
      auto p = params_for(st.setup.defaults, item);
      if (static_cast<int64_t>(prompt.size()) + int64_t{p.gen_length} > int64_t{cfg.max_seq})
        throw std::invalid_argument("prompt (" + std::to_string(prompt.size()) + " tokens) plus gen_length " +
                                    std::to_string(p.gen_length) + " exceeds the model's " +
                                    std::to_string(cfg.max_seq));
      if (auto why = p.validate(); !why.empty()) throw std::invalid_argument(why);
      if (auto why = st.setup.device_set->cannot_decode(p); !why.empty()) throw std::invalid_argument(why);
      c = gpu::canvas::start(prompt, p, cfg.mask_id, cfg.eos_id);
    } else {
      c = gpu::canvas::from_bytes(std::string(item.canvas.begin(), item.canvas.end()));
      if (!item.kv_canvas.empty()) {
        auto source = gpu::canvas::from_bytes(std::string(item.kv_canvas.begin(), item.kv_canvas.end()));
        if (auto why = gpu::rebuild_problem(c, source); !why.empty()) throw std::invalid_argument(why);
        kv_bytes = source.to_bytes();
      } else if (!c.at_refresh_boundary()) {
        throw std::invalid_argument("canvas is not at a refresh boundary");
      }
      streamed = streamed_text_of(*st.setup.tokenizer, c);
    }
    bytes = c.to_bytes();
    progress = progress_of(c);
  } catch (const std::exception& e) {
    problem = e.what();
  }
  if (!problem.empty()) {
    self->send(item.request, rt::failed_atom::value, item.epoch, "rejected: " + problem);
    return;
  }
  // Mid-block with its KV cache sent to this process: it waits for the shards instead of
  // rebuilding, unless the cache was meant for another group.
  if (!kv_bytes.empty() && item.kv.transfer != 0) {
    const auto why = kv_claim_problem(st, item.kv);
    if (why.empty()) {
      if (tell_placement)
        self->send(item.request, rt::placed_atom::value, item.epoch, st.setup.node, st.setup.name);
      pending_kv p;
      p.rows = static_cast<int32_t>(gpu::canvas::from_bytes(bytes).length());
      p.item = std::move(item);
      p.canvas = std::move(bytes);
      p.kv_source = std::move(kv_bytes);
      p.progress = progress;
      p.text = std::move(streamed);
      await_kv(self, std::move(p));
      return;
    }
    rt::log_line(st.setup.name, "request " + std::to_string(item.request_id) +
                                    ": rebuilding its KV cache, not taking the one in flight: " + why);
  }
  // A first placement from the prompt may be refused under overload; a request that
  // already ran somewhere (resumed, re-placed or moved) is accepted work and never is.
  const bool first_placement = item.canvas.empty() && item.epoch == 0 && item.moved_from.empty();
  for (auto& w : st.setup.workers) {
    if (kv_bytes.empty())
      self->send(w, admit_atom::value, item.request_id, bytes);
    else
      self->send(w, admit_atom::value, item.request_id, bytes, kv_bytes);
  }
  if (tell_placement)
    self->send(item.request, rt::placed_atom::value, item.epoch, st.setup.node, st.setup.name);
  if (!item.moved_from.empty()) st.migrations_in += 1;
  auto& q = add_request(self, std::move(item), progress);
  q.arrived_how = kv_bytes.empty() ? "canvas" : "rebuild";
  if (first_placement) st.fresh.push_back(q.live.id);
  // Every request that joins is load on this group, placed, re-placed or moved in.
  st.load.record({now_s(st), q.live.progress.prompt_len, q.live.progress.gen_len,
                  q.live.deadline_s - q.live.arrival_s});
  q.text = std::move(streamed);
  q.streamed_blocks = progress.block;
  // The supervisor counted a request it sent here when it sent it; the next report (a
  // finish, or the notes of its first decision at most kind_report_interval_s later)
  // brings the rest. A group that sheds reports at once: the head refuses at placement by
  // its backlog.
  if (!from_supervisor || st.policy.refuse_overload) report_load(self);
  kick(self);
}

}  // namespace dls::actors::tp_group_impl
