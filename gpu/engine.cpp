#include "gpu/engine.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

namespace dls::gpu {

engine::engine(std::unique_ptr<backend> b) : backend_(std::move(b)) {
  if (!backend_) throw std::invalid_argument("engine needs a backend");
}

request_slot engine::admit(canvas c) { return request_slot{std::move(c), backend_->make_cache()}; }

std::string rebuild_problem(const canvas& c, const canvas& kv_source) {
  if (c.finished || c.at_refresh_boundary()) return "only a canvas mid-block needs its cache rebuilt";
  if (!kv_source.at_refresh_boundary() || kv_source.finished)
    return "the cache source canvas is not at a refresh boundary";
  if (kv_source.length() != c.length() || kv_source.prompt_len != c.prompt_len || kv_source.block != c.block ||
      kv_source.steps > c.steps || kv_source.params.block_length != c.params.block_length ||
      kv_source.params.cache != c.params.cache)
    return "the cache source canvas is not an earlier state of the same block";
  return {};
}

request_slot engine::admit_rebuilt(canvas c, const canvas& kv_source) {
  if (auto why = rebuild_problem(c, kv_source); !why.empty()) throw std::invalid_argument(why);
  request_slot s{std::move(c), backend_->make_cache()};
  step_plan plan = kv_source.next_step(backend_->logit_shift());
  plan.layer1 = backend_->layers();
  // The refresh's proposals are not applied: only the cache it leaves behind is wanted.
  std::vector<forward_item> items{{&kv_source, plan, s.cache.get()}};
  std::vector<std::vector<row_proposal>> unused;
  backend_->forward(items, unused);
  return s;
}

std::vector<step_report> engine::step(const std::vector<request_slot*>& batch, const std::vector<int>& layer_limits) {
  if (!layer_limits.empty() && layer_limits.size() != batch.size())
    throw std::invalid_argument("engine::step: " + std::to_string(layer_limits.size()) + " layer limits for " +
                                std::to_string(batch.size()) + " requests");
  for (int limit : layer_limits)
    if (limit < 0) throw std::invalid_argument("engine::step: a negative layer limit");
  const int layers = backend_->layers();
  items_.clear();
  std::vector<step_report> reports(batch.size());
  std::vector<std::size_t> which;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    auto* s = batch[i];
    if (s->c.finished) {
      reports[i].finished = true;
      continue;
    }
    if (!backend_->scores(score_of(s->c.params.rule)))
      throw std::invalid_argument("the " + backend_->name() + " backend cannot rank by the " +
                                  to_string(s->c.params.rule) + " rule's score");
    if (s->c.params.truncates() && !backend_->truncates())
      throw std::invalid_argument("the " + backend_->name() + " backend cannot truncate distributions by top_p / top_k");
    if (!s->cache) s->cache = backend_->make_cache();
    step_plan plan = s->c.next_step(backend_->logit_shift());
    if (plan.kind == step_kind::refresh) {
      const int limit = layer_limits.empty() ? 0 : layer_limits[i];
      plan.layer0 = s->c.refresh_layers_done;
      plan.layer1 = limit > 0 ? std::min(layers, plan.layer0 + limit) : layers;
    } else {
      if (s->c.refresh_layers_done != 0) throw std::logic_error("engine::step: a split refresh was left unfinished");
      plan.layer1 = layers;
    }
    items_.push_back({&s->c, plan, s->cache.get()});
    which.push_back(i);
  }
  if (items_.empty()) return reports;
  auto t0 = std::chrono::steady_clock::now();
  backend_->forward(items_, proposals_);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (std::size_t j = 0; j < items_.size(); ++j) {
    auto& rep = reports[which[j]];
    auto& c = batch[which[j]]->c;
    const auto& plan = items_[j].plan;
    rep.kind = plan.kind;
    rep.query_rows = plan.query_rows();
    rep.key_rows = plan.key_rows;
    rep.seconds = secs;
    rep.layers = plan.layer1 - plan.layer0;
    if (plan.layer1 < layers) {
      rep.partial = true;
      c.refresh_layers_done = plan.layer1;
    } else {
      c.refresh_layers_done = 0;
      rep.committed = c.apply(proposals_[j]);
    }
    rep.finished = c.finished;
  }
  return reports;
}

int decode_all(engine& e, std::vector<request_slot>& slots, int max_batch) {
  if (max_batch < 1) max_batch = 1;
  int steps = 0;
  std::size_t next = 0;
  std::vector<request_slot*> active;
  while (true) {
    active.erase(std::remove_if(active.begin(), active.end(), [](request_slot* s) { return s->c.finished; }),
                 active.end());
    while (static_cast<int>(active.size()) < max_batch && next < slots.size()) {
      if (!slots[next].c.finished) active.push_back(&slots[next]);
      ++next;
    }
    if (active.empty()) break;
    e.step(active);
    ++steps;
  }
  return steps;
}

}  // namespace dls::gpu
