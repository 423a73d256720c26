// A TP group runs the step loop over its queue. Each step goes to all k workers at
// once; they compute their shards in lockstep through the shared-memory all-reduce and
// end with identical canvases, so rank 0's outcome is the group's. The group then
// streams finished blocks, snapshots canvases at refresh boundaries, and answers.
#include "actors/local_messages.hpp"
#include "actors/node_parts.hpp"
#include "gpu/canvas.hpp"
#include "runtime/log.hpp"

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>

namespace dls::actors {

namespace rt = dls::runtime;
using clock_type = std::chrono::steady_clock;

namespace {

struct queued_request {
  rt::work_item meta;  // without its canvas (the workers hold that)
  bool boundary = true;
  int64_t committed = 0;
  int64_t steps = 0;
  std::size_t streamed_chars = 0;
  int32_t streamed_blocks = 0;
};

struct group_state {
  group_setup setup;
  std::map<uint64_t, queued_request> queue;
  std::deque<uint64_t> order;  // admission order: the batch is the oldest max_batch
  bool stepping = false;
  bool draining = false;
  bool drained = false;
  caf::response_promise drain_rp;
  // Measured totals for `bench-runtime` and the directory.
  uint64_t steps = 0;
  double wall_seconds = 0;    // from sending a step to the last worker's reply
  double engine_seconds = 0;  // the slowest rank's time inside engine::step
  static inline const char* name = "dls.tp_group";
};

using group_ptr = caf::stateful_actor<group_state>*;

constexpr auto step_timeout = std::chrono::minutes(5);

gpu::decode_params params_for(const rt::engine_defaults& d, const rt::work_item& item) {
  gpu::decode_params p;
  p.gen_length = item.gen_length > 0 ? item.gen_length : d.gen_length;
  p.block_length = d.block_length;
  p.rule = gpu::parse_commit_rule(d.commit);
  p.threshold = item.threshold;
  p.cache = gpu::parse_cache_mode(d.cache);
  p.refresh_interval = d.refresh_interval;
  p.temperature = d.temperature;
  p.seed = d.seed;
  return p;
}

void report_load(group_ptr self) {
  auto& st = self->state;
  if (!st.setup.supervisor) return;
  double work = 0;
  for (auto& [id, q] : st.queue) work += static_cast<double>(q.meta.gen_length - q.committed);
  // Step totals ride along so the directory (and bench-runtime) can show the share of
  // step time spent in actor messaging rather than in the engine.
  nlohmann::json stats{{"steps", st.steps}, {"step_wall_s", st.wall_seconds}, {"engine_s", st.engine_seconds}};
  self->send(st.setup.supervisor, rt::load_atom::value, st.setup.name, work,
             static_cast<int32_t>(st.queue.size()), stats.dump());
}

void remove(group_ptr self, uint64_t id) {
  auto& st = self->state;
  st.queue.erase(id);
  st.order.erase(std::remove(st.order.begin(), st.order.end(), id), st.order.end());
  step_order o{{id}};
  for (auto& w : st.setup.workers) self->send(w, drop_atom::value, o);
}

void kick(group_ptr self);

void finish_drain(group_ptr self) {
  auto& st = self->state;
  if (st.drained) return;
  st.drained = true;
  std::vector<uint64_t> ids(st.order.begin(), st.order.end());
  // Rank 0's canvases travel; the other ranks drop theirs.
  step_order o{ids};
  for (std::size_t r = 1; r < st.setup.workers.size(); ++r) self->send(st.setup.workers[r], drop_atom::value, o);
  self->request(st.setup.workers[0], step_timeout, evict_atom::value, o).then([=](canvas_bundle& b) {
    auto& st = self->state;
    std::vector<rt::work_item> items;
    for (auto& [id, bytes] : b.canvases) {
      auto it = st.queue.find(id);
      if (it == st.queue.end()) continue;
      auto item = it->second.meta;
      item.canvas.assign(bytes.begin(), bytes.end());
      items.push_back(std::move(item));
    }
    st.queue.clear();
    st.order.clear();
    st.drain_rp.deliver(caf::make_message(std::move(items)));
  }, [=](caf::error& e) {
    // Without rank 0's canvases these requests cannot move: end them explicitly.
    auto& st = self->state;
    for (auto& [id, q] : st.queue)
      self->send(q.meta.request, rt::failed_atom::value, q.meta.epoch, "lost during regroup: " + to_string(e));
    st.queue.clear();
    st.order.clear();
    st.drain_rp.deliver(caf::make_message(std::vector<rt::work_item>{}));
  });
}

void on_step_done(group_ptr self, const std::vector<uint64_t>& ids, std::vector<step_result>& results,
                  clock_type::time_point t0) {
  auto& st = self->state;
  st.stepping = false;
  double slowest = 0;
  std::string error;
  for (auto& r : results) {
    slowest = std::max(slowest, r.seconds);
    if (!r.error.empty() && error.empty()) error = r.error;
  }
  st.steps += 1;
  st.wall_seconds += std::chrono::duration<double>(clock_type::now() - t0).count();
  st.engine_seconds += slowest;
  if (!error.empty()) {
    rt::log_line(st.setup.name, "step failed: " + error);
    for (auto id : ids) {
      auto it = st.queue.find(id);
      if (it == st.queue.end()) continue;
      self->send(it->second.meta.request, rt::failed_atom::value, it->second.meta.epoch, "engine error: " + error);
      remove(self, id);
    }
    report_load(self);
    kick(self);
    return;
  }
  bool changed = false;
  for (auto& o : results[0].outcomes) {
    auto it = st.queue.find(o.id);
    if (it == st.queue.end()) continue;
    auto& q = it->second;
    q.boundary = o.boundary;
    q.steps = o.steps;
    q.committed = o.committed;
    const auto& req = q.meta.request;
    if (!o.answer.empty() || o.report.finished) {
      auto text = st.setup.tokenizer->decode(o.answer);
      if (text.size() > q.streamed_chars) {
        rt::block_chunk chunk{q.meta.request_id, 0, q.streamed_blocks++, text.substr(q.streamed_chars)};
        q.streamed_chars = text.size();
        self->send(req, rt::block_atom::value, q.meta.epoch, chunk);
      }
      if (o.report.finished) {
        rt::run_result r{text, static_cast<int32_t>(o.steps), static_cast<int32_t>(o.committed), st.setup.node,
                         st.setup.name};
        self->send(req, rt::finished_atom::value, q.meta.epoch, r);
        remove(self, o.id);
        changed = true;
        continue;
      }
    }
    if (o.boundary && !o.canvas.empty())
      self->send(req, rt::snapshot_atom::value, q.meta.epoch, std::vector<char>(o.canvas.begin(), o.canvas.end()),
                 static_cast<int32_t>(o.steps), static_cast<int32_t>(o.committed));
  }
  if (changed) report_load(self);
  kick(self);
}

void run_step(group_ptr self) {
  auto& st = self->state;
  if (st.stepping) return;
  std::vector<uint64_t> ids;
  for (auto id : st.order) {
    if (static_cast<int>(ids.size()) >= st.setup.defaults.max_batch) break;
    // While draining, requests wait at their refresh boundary: there the canvas alone
    // describes them, so they move without their KV cache.
    if (st.draining && st.queue[id].boundary) continue;
    ids.push_back(id);
  }
  if (ids.empty()) {
    if (st.draining) finish_drain(self);
    return;
  }
  st.stepping = true;
  auto k = st.setup.workers.size();
  auto results = std::make_shared<std::vector<step_result>>(k);
  auto left = std::make_shared<std::size_t>(k);
  auto t0 = clock_type::now();
  step_order order{ids};
  for (std::size_t r = 0; r < k; ++r) {
    // Generous: a step of a large model takes seconds. A worker that never answers
    // fails its batch explicitly instead of stalling the group forever.
    self->request(st.setup.workers[r], step_timeout, step_atom::value, order)
        .then(
            [=](step_result& res) {
              (*results)[r] = std::move(res);
              if (--*left == 0) on_step_done(self, ids, *results, t0);
            },
            [=](caf::error& e) {
              (*results)[r].error = "worker " + std::to_string(r) + " lost: " + to_string(e);
              if (--*left == 0) on_step_done(self, ids, *results, t0);
            });
  }
}

// Steps are triggered by a message to self, so admissions and drains queued in the
// mailbox are handled between any two steps.
void kick(group_ptr self) {
  if (!self->state.stepping && !self->state.queue.empty()) self->send(self, step_atom::value);
  else if (self->state.draining && self->state.queue.empty() && !self->state.stepping) finish_drain(self);
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
  auto world = static_cast<int>(st.setup.workers.size());
  auto ar = std::make_shared<gpu::shm_allreduce_group>(world);
  for (int r = 0; r < world; ++r)
    self->send(st.setup.workers[static_cast<std::size_t>(r)], configure_atom::value, shard_setup{r, world, ar});
  return {
      [=](rt::enqueue_atom, rt::work_item& item) -> caf::result<bool> {
        auto& st = self->state;
        // A drained group is about to be replaced: the supervisor places the item again.
        if (st.drained) return caf::make_error(caf::sec::request_receiver_down);
        const auto& cfg = st.setup.model->config;
        std::string bytes;
        std::string problem;
        try {
          gpu::canvas c;
          if (item.canvas.empty()) {
            auto prompt = st.setup.tokenizer->encode(item.prompt);
            auto p = params_for(st.setup.defaults, item);
            if (static_cast<int64_t>(prompt.size()) + int64_t{p.gen_length} > int64_t{cfg.max_seq})
              throw std::invalid_argument("prompt (" + std::to_string(prompt.size()) + " tokens) plus gen_length " +
                                          std::to_string(p.gen_length) + " exceeds the model's " +
                                          std::to_string(cfg.max_seq));
            if (auto why = p.validate(); !why.empty()) throw std::invalid_argument(why);
            c = gpu::canvas::start(prompt, p, cfg.mask_id, cfg.eos_id);
          } else {
            c = gpu::canvas::from_bytes(std::string(item.canvas.begin(), item.canvas.end()));
            if (!c.at_refresh_boundary()) throw std::invalid_argument("canvas is not at a refresh boundary");
          }
          bytes = c.to_bytes();
        } catch (const std::exception& e) {
          problem = e.what();
        }
        if (!problem.empty()) {
          self->send(item.request, rt::failed_atom::value, item.epoch, "rejected: " + problem);
          return true;
        }
        for (auto& w : st.setup.workers) self->send(w, admit_atom::value, item.request_id, bytes);
        self->send(item.request, rt::placed_atom::value, item.epoch, st.setup.node, st.setup.name);
        item.canvas.clear();
        auto id = item.request_id;
        queued_request q;
        q.meta = std::move(item);
        st.queue[id] = std::move(q);
        st.order.push_back(id);
        report_load(self);
        kick(self);
        return true;
      },
      [=](step_atom) { run_step(self); },
      // A withdrawn request leaves the batch; a step in flight that still holds it is
      // ignored for it when it returns (it is no longer queued).
      [=](rt::cancel_atom, uint64_t id) {
        if (!self->state.queue.count(id)) return;
        remove(self, id);
        report_load(self);
        kick(self);
      },
      [=](rt::drain_atom) {
        auto& st = self->state;
        st.drain_rp = self->make_response_promise();
        st.draining = true;
        if (!st.stepping) run_step(self);
        return st.drain_rp;
      },
  };
}

}  // namespace

caf::actor spawn_tp_group(caf::actor_system& sys, group_setup setup) { return sys.spawn(tp_group, std::move(setup)); }

}  // namespace dls::actors
