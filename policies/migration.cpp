#include "policies/migration.hpp"

#include "policies/scheduler.hpp"

#include <stdexcept>
#include <string>
#include <algorithm>
#include <cmath>
#include <limits>

namespace dls::policy {

void set_pace(group_summary& s, const std::vector<request_view>& held, double now, const quality_model& q) {
  s.at_risk = false;
  double tau_sum = 0;
  int block_len = 0;
  for (const auto& r : held) {
    tau_sum += r.tau;
    block_len = std::max(block_len, r.block_len);
    if (!s.at_risk && slack_s(r, now, q, s.step_s) < 0) s.at_risk = true;
  }
  if (!held.empty() && block_len > 0)
    s.steps_per_block = q.steps_per_refresh(block_len, tau_sum / static_cast<double>(held.size()));
}

transfer_cost move_cost(const request_view& r, bool same_node, double dst_refresh_extra_s,
                        const link_params& link) {
  const double bw = same_node ? link.intra_node_bytes_per_s : link.inter_node_bytes_per_s;
  const double l = r.canvas_len();
  const double canvas_bytes = 4.0 * l + 64.0;
  transfer_cost c;
  c.bytes = canvas_bytes;
  c.seconds = link.latency_s + canvas_bytes / bw;
  if (r.next_kind == step_kind::refresh) return c;  // block boundary: the KV is stale anyway
  const double kv_bytes = link.kv_bytes_per_token * l;
  const double t_kv = link.latency_s + (kv_bytes + canvas_bytes) / bw;
  const double t_rebuild = c.seconds + dst_refresh_extra_s;
  if (t_kv <= t_rebuild) {
    c.bytes += kv_bytes;
    c.seconds = t_kv;
    c.kv_moved = true;
  } else {
    c.seconds = t_rebuild;
    c.rebuild = true;
  }
  return c;
}

const transfer_link* measured_link(const std::vector<transfer_link>& links, const std::string& tls) {
  for (const auto& l : links)
    if (l.tls == tls) return &l;
  return nullptr;
}

kv_move_choice compare_kv_move(double kv_bytes, const transfer_link& link, const step_cost_model& m, int tp,
                               int canvas_len, int block_len) {
  if (!(link.bytes_per_s > 0)) throw std::invalid_argument("compare_kv_move: the link has no measured bandwidth");
  if (!m.supports(tp)) throw std::invalid_argument("compare_kv_move: the profile has no TP " + std::to_string(tp));
  kv_move_choice c;
  c.transfer_s = link.latency_s + kv_bytes / link.bytes_per_s;
  c.recompute_s = m.step_seconds(tp, std::vector<step_item>{step_item_of(step_kind::refresh, canvas_len, block_len)}) -
                  m.step_seconds(tp, std::vector<step_item>{step_item_of(step_kind::reuse, canvas_len, block_len)});
  c.transfer = c.transfer_s <= c.recompute_s;
  return c;
}

namespace {

double alone_s(const step_cost_model& m, int tp, const request_view& r, step_kind kind) {
  batch_totals a;
  a.add(step_item_of(kind, r.canvas_len(), r.block_len));
  return m.step_seconds(tp, a);
}

double refresh_alone_s(const step_cost_model& m, int tp, const request_view& r) {
  return alone_s(m, tp, r, step_kind::refresh);
}

double refresh_extra_s(const step_cost_model& m, int tp, const request_view& r) {
  return std::max(0.0, refresh_alone_s(m, tp, r) - alone_s(m, tp, r, step_kind::reuse));
}

struct candidate {
  double slack;
  std::size_t group;
  std::size_t index;
};

std::vector<migration_decision> plan_balance(std::vector<group_summary> gs,
                                             const std::vector<const std::vector<request_view>*>& reqs,
                                             const step_cost_model& m, const migration_config& cfg,
                                             const link_params& link) {
  std::vector<migration_decision> out;
  std::vector<std::vector<bool>> moved(gs.size());
  for (std::size_t g = 0; g < gs.size(); ++g) moved[g].assign(reqs[g]->size(), false);
  auto per_device = [&](std::size_t g) { return gs[g].load.requests / gs[g].tp; };
  for (int k = 0; k < cfg.max_moves; ++k) {
    std::size_t hi = gs.size(), lo = gs.size();
    for (std::size_t g = 0; g < gs.size(); ++g) {
      if (hi == gs.size() || per_device(g) > per_device(hi)) hi = g;
      if (!gs[g].draining && gs[g].active < cfg.max_active &&
          (lo == gs.size() || per_device(g) < per_device(lo)))
        lo = g;
    }
    if (hi == gs.size() || lo == gs.size() || hi == lo) break;
    if (per_device(hi) <= cfg.imbalance * per_device(lo) + 1.0) break;
    // Cheapest request to move (canvas-only moves first); ties by id.
    std::size_t best = reqs[hi]->size();
    transfer_cost best_cost;
    for (std::size_t i = 0; i < reqs[hi]->size(); ++i) {
      const auto& r = (*reqs[hi])[i];
      if (moved[hi][i] || r.canvas_len() > gs[lo].kv_free_tokens) continue;
      auto c = move_cost(r, gs[hi].node == gs[lo].node, refresh_extra_s(m, gs[lo].tp, r), link);
      if (best == reqs[hi]->size() || c.seconds < best_cost.seconds ||
          (c.seconds == best_cost.seconds && r.id < (*reqs[hi])[best].id)) {
        best = i;
        best_cost = c;
      }
    }
    if (best == reqs[hi]->size()) break;
    const auto& r = (*reqs[hi])[best];
    moved[hi][best] = true;
    out.push_back({r.id, gs[hi].id, gs[lo].id, best_cost});
    gs[hi].load.remove(r.canvas_len());
    gs[hi].active -= 1;
    gs[lo].load.add(r.canvas_len());
    gs[lo].active += 1;
    gs[lo].kv_free_tokens -= r.canvas_len();
  }
  return out;
}

}  // namespace

std::vector<migration_decision> plan_migrations(
    const std::vector<group_summary>& groups, const std::vector<const std::vector<request_view>*>& reqs,
    double now, const step_cost_model& m, const quality_model& q, const migration_config& cfg,
    const link_params& link) {
  if (cfg.mode == migration_mode::none || groups.size() < 2) return {};
  if (cfg.mode == migration_mode::balance) return plan_balance(groups, reqs, m, cfg, link);

  std::vector<group_summary> gs = groups;
  const double inf = std::numeric_limits<double>::infinity();
  // Largest step time each destination tolerates before one of its on-time requests misses.
  std::vector<double> max_step(gs.size(), inf);
  std::vector<candidate> cands;
  for (std::size_t g = 0; g < gs.size(); ++g) {
    for (std::size_t i = 0; i < reqs[g]->size(); ++i) {
      const auto& r = (*reqs[g])[i];
      const double steps = remaining_steps(r, r.tau, q).total();
      const double slack = r.deadline_s - now - steps * gs[g].step_s;
      if (slack >= 0) {
        if (steps > 0) max_step[g] = std::min(max_step[g], (r.deadline_s - now) / steps);
      } else if (gs[g].at_risk || gs[g].draining) {
        cands.push_back({slack, g, i});
      }
    }
  }
  // Only the nearest-to-rescue candidates are tried: under overload thousands have negative
  // slack, and trying each against every destination made this the simulator's bottleneck.
  const std::size_t tries = std::min(cands.size(), static_cast<std::size_t>(4 * std::max(1, cfg.max_moves)));
  std::partial_sort(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(tries), cands.end(),
                    [&](const candidate& a, const candidate& b) {
                      if (a.slack != b.slack) return a.slack > b.slack;
                      return (*reqs[a.group])[a.index].id < (*reqs[b.group])[b.index].id;
                    });
  cands.resize(tries);
  // Destinations are scanned from the least loaded per device; the scan is bounded so one
  // invocation stays O(candidates x scan) at thousands of groups.
  std::vector<std::size_t> dst_order(gs.size());
  for (std::size_t g = 0; g < gs.size(); ++g) dst_order[g] = g;
  std::sort(dst_order.begin(), dst_order.end(), [&](std::size_t a, std::size_t b) {
    const double la = gs[a].load.requests / gs[a].tp, lb = gs[b].load.requests / gs[b].tp;
    return la != lb ? la < lb : gs[a].id < gs[b].id;
  });
  constexpr std::size_t scan = 32;
  std::vector<migration_decision> out;
  for (const auto& c : cands) {
    if (static_cast<int>(out.size()) >= cfg.max_moves) break;
    const auto& r = (*reqs[c.group])[c.index];
    const double steps = remaining_steps(r, r.tau, q).total();
    const double budget = r.deadline_s - now;
    std::size_t best = gs.size();
    double best_finish = inf, best_step = 0;
    transfer_cost best_cost;
    std::size_t seen = 0;
    for (std::size_t h : dst_order) {
      if (seen >= scan) break;
      if (h == c.group || gs[h].draining || gs[h].active >= cfg.max_active ||
          gs[h].kv_free_tokens < r.canvas_len())
        continue;
      ++seen;
      group_load after = gs[h].load;
      after.add(r.canvas_len());
      const double step = expected_step_s(m, gs[h].tp, after, r.block_len, gs[h].steps_per_block,
                                          cfg.token_budget);
      if (step > max_step[h]) continue;  // would make an on-time request there miss
      const auto cost = move_cost(r, gs[h].node == gs[c.group].node, refresh_extra_s(m, gs[h].tp, r), link);
      // Only the canvas and finished KV move: the layers a split refresh has run are lost and
      // run again there.
      const double redo = r.next_kind == step_kind::refresh ? r.refresh_done * refresh_alone_s(m, gs[h].tp, r) : 0.0;
      const double finish = cost.seconds + redo + steps * step;
      if (finish <= budget && finish < best_finish) {
        best = h;
        best_finish = finish;
        best_step = step;
        best_cost = cost;
      }
    }
    if (best == gs.size()) continue;
    out.push_back({r.id, gs[c.group].id, gs[best].id, best_cost});
    gs[c.group].load.remove(r.canvas_len());
    gs[c.group].active -= 1;
    auto& d = gs[best];
    d.load.add(r.canvas_len());
    d.active += 1;
    d.kv_free_tokens -= r.canvas_len();
    d.step_s = best_step;
    if (steps > 0) max_step[best] = std::min(max_step[best], (budget - best_cost.seconds) / steps);
  }
  return out;
}

}  // namespace dls::policy
