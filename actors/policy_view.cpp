#include "actors/policy_view.hpp"

#include "policies/scheduler.hpp"

#include <algorithm>

namespace dls::actors {

canvas_progress progress_of(const gpu::canvas& c) {
  canvas_progress p;
  p.prompt_len = c.prompt_len;
  p.gen_len = c.length() - c.prompt_len;
  p.block_len = c.params.block_length;
  p.finished = c.finished;
  p.tau_driven = c.params.rule == gpu::commit_rule::threshold;
  p.block = c.finished ? c.num_blocks() : c.block;
  p.step_in_block = c.step_in_block;
  if (!c.finished) {
    const auto b0 = c.ids.begin() + c.block_begin(), b1 = c.ids.begin() + c.block_end();
    p.masks_left = static_cast<int32_t>(std::count(b0, b1, c.mask_id));
    p.next_refresh = c.at_refresh_boundary();
  }
  return p;
}

bool tau_held(const runtime::work_item& item, const canvas_progress& p) { return item.threshold_pinned || !p.tau_driven; }

policy::request_view view_of(const live_request& r) {
  const auto& p = r.progress;
  policy::request_view v;
  v.id = r.id;
  v.arrival_s = r.arrival_s;
  v.deadline_s = r.deadline_s;
  v.tau = r.tau;
  v.tau_low = r.tau_low;
  v.tau_pinned = r.tau_pinned;
  v.tau_floor = r.tau_floor;
  v.reject_on_miss = r.reject_on_miss;
  v.prompt_len = p.prompt_len;
  v.gen_len = p.gen_len;
  v.block_len = p.block_len;
  v.blocks_done = p.block;
  v.steps_in_block = p.step_in_block;
  v.masks_left_in_block = p.step_in_block > 0 ? p.masks_left : 0;
  v.next_kind = p.next_refresh ? policy::step_kind::refresh : policy::step_kind::reuse;
  v.group = r.group;
  return v;
}

policy::group_snapshot snapshot_of(const live_group& g, double now_s, const std::vector<const live_request*>& active,
                                   const std::vector<const live_request*>& queued) {
  policy::group_snapshot s;
  s.now_s = now_s;
  s.group.id = g.id;
  s.group.node = g.node;
  s.group.tp = g.tp;
  s.group.devices = g.devices;
  s.group.draining = g.draining;
  s.tau_cap = g.tau_cap;
  double held = 0;
  s.active.reserve(active.size());
  for (const auto* r : active) {
    s.active.push_back(view_of(*r));
    held += s.active.back().canvas_len();
  }
  s.queued.reserve(queued.size());
  s.group.queue.reserve(queued.size());
  for (const auto* r : queued) {
    s.queued.push_back(view_of(*r));
    s.group.queue.push_back(r->id);
  }
  s.kv_free_tokens = std::max(0.0, g.kv_capacity_tokens - held);
  return s;
}

std::vector<const std::vector<policy::request_view>*> migration_input::request_lists() const {
  std::vector<const std::vector<policy::request_view>*> out;
  for (const auto& r : requests) out.push_back(&r);
  return out;
}

migration_input migration_input_of(const std::vector<runtime::group_report>& reports, const policy::quality_model& q) {
  migration_input in;
  std::vector<std::string> nodes;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& g = reports[i];
    policy::group_summary s;
    s.id = static_cast<int>(i);
    auto n = std::find(nodes.begin(), nodes.end(), g.node);
    s.node = static_cast<int>(n - nodes.begin());
    if (n == nodes.end()) nodes.push_back(g.node);
    s.tp = g.tp;
    s.draining = g.draining;
    s.kv_free_tokens = g.kv_free_tokens;
    s.step_s = g.step_s;
    std::vector<policy::request_view> views;
    for (const auto& r : g.requests) {
      live_request lr;
      lr.id = r.id;
      lr.arrival_s = -r.age_s;
      lr.deadline_s = r.to_deadline_s;
      lr.tau = r.tau;
      lr.tau_pinned = r.tau_pinned;
      lr.tau_floor = r.tau_floor;
      // The report's tau_pinned already counts a rule that does not read tau (tau_held).
      lr.progress = {r.prompt_len, r.gen_len, r.block_len, r.block, r.step_in_block, r.masks_left, r.next_refresh,
                     false,        true};
      lr.group = s.id;
      views.push_back(view_of(lr));
      s.load.add(views.back().canvas_len());
      s.active += r.active;
    }
    policy::set_pace(s, views, 0.0, q);  // deadlines are relative to now here
    in.groups.push_back(s);
    in.requests.push_back(std::move(views));
    in.names.push_back(g.group);
  }
  return in;
}

std::shared_ptr<const policy_context> make_policy_context(const runtime::scheduler_settings& s,
                                                          const runtime::engine_defaults& e) {
  auto ctx = std::make_shared<policy_context>();
  if (!s.profile_text.empty()) ctx->cost = policy::parse_step_cost_profile(s.profile_text);
  ctx->quality = s.quality_text.empty() ? policy::quality_model({{0.0, 1.0, 1.0}, {1.0, 1.0, 1.0}})
                                        : policy::parse_quality_curve(s.quality_text);
  ctx->quality.set_refresh_interval(e.decode.refresh_period());
  ctx->knobs.token_budget = s.token_budget;
  ctx->knobs.max_batch = e.max_batch;
  ctx->knobs.max_active = s.max_active;
  ctx->knobs.tau_max = e.decode.threshold;
  ctx->knobs.tau_min = s.tau_min;
  ctx->knobs.tau_step = s.tau_step;
  ctx->knobs.accuracy_budget = s.accuracy_budget;
  ctx->knobs.cap_forecast_s = s.cap_forecast_ms / 1e3;
  ctx->knobs.cap_forecast_refresh_s = s.cap_forecast_refresh_ms / 1e3;
  ctx->knobs.control_interval_s = s.control_interval_ms / 1e3;
  ctx->knobs.refuse_overload = s.refuse_overload;
  ctx->knobs.reject_on_miss = s.reject_on_miss;
  ctx->slo_scale = s.slo_scale;
  ctx->initial_policy = s.policy;
  return ctx;
}

}  // namespace dls::actors
