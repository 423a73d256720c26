#include "policies/scheduler.hpp"

#include "policies/predict.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <utility>

namespace dls::policy {

double slack_s(const request_view& r, double now, curve_cache& q, double step_s) {
  return r.deadline_s - now - q.remaining_steps(r, r.tau).total() * step_s;
}

double slack_s(const request_view& r, double now, const quality_model& q, double step_s) {
  curve_cache c(q);
  return slack_s(r, now, c, step_s);
}

namespace {

int query_rows_of(const request_view& r) {
  return r.next_kind == step_kind::refresh ? r.canvas_len() : r.block_len;
}

// Sort key: (late, value) so that late requests can be grouped after the on-time ones.
// Ties break on id, which keeps the order deterministic whatever the input order.
// late: 0 on time; 1 missed and past its grace (overdue), by arrival; 2 the other late ones.
struct keyed {
  int late;
  double value;
  std::uint64_t id;
  int index;
  double budget;   // delay this step may add to the request without making it miss
  bool promoted = false;  // the oldest missed request, moved to the front
  bool operator<(const keyed& o) const {
    if (promoted != o.promoted) return promoted;
    return before(o);
  }
  bool before(const keyed& o) const {  // the order without the promotion
    if (late != o.late) return late < o.late;
    if (value != o.value) return value < o.value;
    return id < o.id;
  }
};

// Keys read in order, sorted only as far as they are read: a step takes a few requests of a
// long queue, and sorting the whole queue every decision would cost more than choosing them.
// Ids are unique, so the order is the full sort's.
class in_order {
 public:
  explicit in_order(std::vector<keyed>& keys) : k_(keys) {}
  std::size_t size() const { return k_.size(); }
  const keyed& operator[](std::size_t i) {
    if (i >= sorted_) {
      const std::size_t to = std::min(k_.size(), std::max({i + 1, 2 * sorted_, first_chunk}));
      const auto from = k_.begin() + static_cast<std::ptrdiff_t>(sorted_);
      const auto until = k_.begin() + static_cast<std::ptrdiff_t>(to);
      if (until != k_.end()) std::nth_element(from, until - 1, k_.end());
      std::sort(from, until);
      sorted_ = to;
    }
    return k_[i];
  }

 private:
  static constexpr std::size_t first_chunk = 16;
  std::vector<keyed>& k_;
  std::size_t sorted_ = 0;
};

// A missed request past its grace: from here on only its latency matters, and among such
// requests the tail is shortest when the oldest go first (FCFS), while shortest-first would
// let long ones wait behind every short one that misses after them. `d` is the deadline it is
// scheduled against (renewed or its own).
bool overdue(const request_view& r, double now, double d, const scheduler_config& cfg) {
  return cfg.oldest_missed_first && d <= r.deadline_s &&
         now - r.deadline_s >= cfg.missed_grace * (r.deadline_s - r.arrival_s);
}

// The seconds of a step of one request alone on the group, a refresh and a reuse, each canvas
// length costed once: a decision weighs every queued request's best case, and a queue repeats
// lengths. The first `max_shapes` lengths are held inline (a small group's decision allocates
// nothing), the others in a map.
class solo_steps {
 public:
  solo_steps(const step_cost_model& cost, int tp) : cost_(cost), tp_(tp) {}
  std::pair<double, double> of(int canvas_len, int block_len) {
    for (std::size_t i = 0; i < n_; ++i)
      if (seen_[i].canvas_len == canvas_len && seen_[i].block_len == block_len) return seen_[i].seconds;
    const auto key = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(canvas_len)) << 32) |
                     static_cast<std::uint32_t>(block_len);
    if (n_ == max_shapes)
      if (auto it = more_.find(key); it != more_.end()) return it->second;
    batch_totals ref, reu;
    ref.add(step_item_of(step_kind::refresh, canvas_len, block_len));
    reu.add(step_item_of(step_kind::reuse, canvas_len, block_len));
    const std::pair<double, double> seconds{cost_.step_seconds(tp_, ref), cost_.step_seconds(tp_, reu)};
    if (n_ < max_shapes)
      seen_[n_++] = {canvas_len, block_len, seconds};
    else
      more_.emplace(key, seconds);
    return seconds;
  }

 private:
  static constexpr std::size_t max_shapes = 16;  // inline; a long queue's further lengths go to more_
  struct shape {
    int canvas_len = 0, block_len = 0;
    std::pair<double, double> seconds;
  };
  const step_cost_model& cost_;
  int tp_;
  std::array<shape, max_shapes> seen_;
  std::size_t n_ = 0;
  std::unordered_map<std::uint64_t, std::pair<double, double>> more_;
};

// Seconds the request still needs if every one of its steps ran alone on this group: the
// best case. A request whose best case misses the deadline is late whatever we do.
double best_case_remaining_s(const request_view& r, curve_cache& q, solo_steps& solo, double tau) {
  const auto c = q.remaining_steps(r, tau);
  const auto [refresh_s, reuse_s] = solo.of(r.canvas_len(), r.block_len);
  // A started block whose KV must be rebuilt still costs one refresh.
  const double extra = r.next_kind == step_kind::refresh && r.steps_in_block > 0 ? 1.0 : 0.0;
  // A layer-split refresh in progress has only its remaining layers left.
  const double done = r.next_kind == step_kind::refresh ? r.refresh_done : 0.0;
  return (c.refresh + extra - done) * refresh_s + std::max(0.0, c.reuse - extra) * reuse_s;
}

double best_case_remaining_s(const request_view& r, curve_cache& q, solo_steps& solo) {
  return best_case_remaining_s(r, q, solo, r.tau);
}

void order_indices(const std::vector<request_view>& reqs, double now, const scheduler_config& cfg,
                   const quality_model& model, double step_s, std::vector<keyed>& keys,
                   const step_cost_model* cost, int tp) {
  curve_cache q(model);
  std::optional<solo_steps> solo;
  if (cost) solo.emplace(*cost, tp);
  keys.clear();
  keys.reserve(reqs.size());
  for (int i = 0; i < static_cast<int>(reqs.size()); ++i) {
    const auto& r = reqs[static_cast<std::size_t>(i)];
    if (cfg.order == queue_order::fcfs) {
      keys.push_back({0, r.arrival_s, r.id, i, 0.0});
      continue;
    }
    if (cfg.chain_slack && cost) {
      // Slack against the request's own chain: the delay it can still absorb if each of its
      // remaining steps ran alone on this group. On-time requests go in deadline order (EDF)
      // with that slack as their budget; late ones (negative chain slack) as below.
      const double best = best_case_remaining_s(r, q, *solo);
      const double d = cfg.demote_late ? effective_deadline_s(r, now, best, cfg) : r.deadline_s;
      const double chain = d - now - best;
      if (!cfg.demote_late || chain >= 0)
        keys.push_back({0, d, r.id, i, std::max(0.0, chain)});
      else if (overdue(r, now, d, cfg))
        keys.push_back({1, r.arrival_s, r.id, i, 0.0});
      else
        keys.push_back({2, best, r.id, i, 0.0});
      continue;
    }
    const double s = slack_s(r, now, q, step_s);
    if (!cfg.demote_late || s >= 0) {
      keys.push_back({0, s, r.id, i, std::max(0.0, s)});
      continue;
    }
    // Negative slack at the group's current pace. With a cost model, check the best case:
    // if it still makes it, it is urgent (keep its slack as key); if not it is late and goes
    // after all on-time requests, shortest remaining work first (least mean latency).
    if (cost) {
      const double best = best_case_remaining_s(r, q, *solo);
      const double best_slack = r.deadline_s - now - best;
      if (best_slack >= 0)
        keys.push_back({0, s, r.id, i, best_slack});
      else if (overdue(r, now, r.deadline_s, cfg))
        keys.push_back({1, r.arrival_s, r.id, i, 0.0});
      else
        keys.push_back({2, best, r.id, i, 0.0});
    } else {
      keys.push_back({2, q.remaining_steps(r, r.tau).total(), r.id, i, 0.0});
    }
  }
  // The keys are sorted as they are read (in_order); the promoted one sorts first.
  if (cfg.oldest_missed_first && cfg.order == queue_order::least_slack && cfg.demote_late) {
    auto oldest = keys.end();
    for (auto it = keys.begin(); it != keys.end(); ++it) {
      const auto& r = reqs[static_cast<std::size_t>(it->index)];
      const bool missed = it->late || r.deadline_s < it->value;  // late, or renewed
      if (!missed || now - r.deadline_s < cfg.missed_grace * (r.deadline_s - r.arrival_s)) continue;
      if (oldest == keys.end()) {
        oldest = it;
        continue;
      }
      const double a = r.arrival_s, b = reqs[static_cast<std::size_t>(oldest->index)].arrival_s;
      if (a < b || (a == b && it->before(*oldest))) oldest = it;  // ties: the first in order
    }
    if (oldest != keys.end()) {
      oldest->late = 1;     // missed: it sets no slack budget for the others
      oldest->budget = 0;
      oldest->promoted = true;
    }
  }
}

// Deferring a request that adds `delta_s` to the step lets the `riders` already in it finish
// `delta_s` sooner, and loses what batching saves the request, its step alone minus `delta_s`:
// extra group time that delays every request still there when it runs later, if the group is
// busy then. `delayed` is the expected number of those (form_batch). `own_wait` is what the
// deferral costs the request itself where only its latency is left to win (a late one: form_batch
// passes the larger of the step it waits out and how far past its deadline it already is).
// Worth it only where the riders gain more than everyone loses.
bool worth_deferring(const step_cost_model& cost, int tp, const step_item& item, double delta_s, std::size_t riders,
                     double delayed, double own_wait) {
  batch_totals alone;
  alone.add(item);
  return static_cast<double>(riders) * delta_s > delayed * (cost.step_seconds(tp, alone) - delta_s) + own_wait;
}

}  // namespace

void form_batch(const std::vector<request_view>& active, double now, const scheduler_config& cfg,
                const quality_model& q, double step_s, std::vector<int>& out,
                const step_cost_model* cost, int tp, std::vector<double>* shares, std::size_t waiting,
                double utilization) {
  out.clear();
  if (shares) shares->clear();
  if (active.empty()) return;
  auto share_of = [](const request_view& r) { return next_step_item(r).layer_share; };
  const bool budgeted = cfg.slack_budget && cost && cfg.order == queue_order::least_slack;
  // Common case: everyone fits and nobody refreshes (so nobody can hold up the others), so
  // order does not matter and sorting would be wasted work.
  long rows = 0;
  bool any_refresh = false;
  for (const auto& r : active) {
    rows += query_rows_of(r);
    any_refresh |= r.next_kind == step_kind::refresh;
  }
  if (rows <= cfg.token_budget && static_cast<int>(active.size()) <= cfg.max_batch &&
      (!budgeted || !any_refresh)) {
    out.resize(active.size());
    std::iota(out.begin(), out.end(), 0);
    if (shares)
      for (const auto& r : active) shares->push_back(share_of(r));
    return;
  }
  // The chance that a deferred request runs later on a busy group: 1 when more work is ready
  // than this step takes, else the group's predicted utilization. Then the extra time delays
  // every request present (active and waiting).
  const bool full = waiting > 0 || rows > cfg.token_budget || static_cast<int>(active.size()) > cfg.max_batch;
  const double busy = full ? 1.0 : std::clamp(utilization, 0.0, 1.0);
  const double present = static_cast<double>(active.size() + waiting);
  static thread_local std::vector<keyed> keys;
  order_indices(active, now, cfg, q, step_s, keys, budgeted ? cost : nullptr, tp);
  long used = 0;
  int refreshes = 0;
  batch_totals totals;
  double step = 0;
  double budget = std::numeric_limits<double>::infinity();  // least slack left in the batch
  in_order ordered(keys);
  for (std::size_t n = 0; n < ordered.size(); ++n) {
    if (static_cast<int>(out.size()) >= cfg.max_batch) break;
    const auto& k = ordered[n];
    const auto& r = active[static_cast<std::size_t>(k.index)];
    const int qr = query_rows_of(r);
    if (!out.empty() && used + qr > cfg.token_budget) continue;
    double share = share_of(r);
    const bool refresh = r.next_kind == step_kind::refresh;
    if (budgeted) {
      auto item = next_step_item(r);
      totals.add(item);
      double next = cost->step_seconds(tp, totals);
      // A second refresh gets a tighter budget: what it adds to the step, all of the batch waits.
      const double limit = refresh && refreshes > 0 ? std::min(budget, cfg.refresh_join_growth * step) : budget;
      if (!out.empty() && next - step > limit &&
          (busy <= 0 ||
           worth_deferring(*cost, tp, item, next - step, out.size(), busy * present,
                           k.late ? std::max(step, now - r.deadline_s) : 0.0))) {
        totals.remove(item);
        if (cfg.refresh_split <= 0 || !refresh) continue;
        // The longest whole number of layer ranges that fits, found by bisection (the step time
        // grows with the share); none fits: wait as before. The cap is the smaller of the slack
        // budget and a small growth of the step: the chunk mostly fills the compute that a
        // memory-bound step leaves idle. Spending the whole budget on chunks drains the on-time
        // requests' slack step after step, and they then miss (docs/performance.md).
        const int units_left = static_cast<int>(std::lround(share * cfg.refresh_split));
        const double cap = std::min(limit, cfg.refresh_split_growth * step);
        int lo = 0, hi = units_left - 1;
        while (lo < hi) {
          const int mid = (lo + hi + 1) / 2;
          batch_totals trial = totals;
          trial.add(step_item_for(r, static_cast<double>(mid) / cfg.refresh_split));
          if (cost->step_seconds(tp, trial) - step <= cap)
            lo = mid;
          else
            hi = mid - 1;
        }
        if (lo == 0) continue;
        share = static_cast<double>(lo) / cfg.refresh_split;
        item = step_item_for(r, share);
        totals.add(item);
        next = cost->step_seconds(tp, totals);
      }
      const double delta = next - step;
      step = next;
      budget -= out.empty() ? 0.0 : delta;
      if (!k.late) budget = std::min(budget, k.budget);
    }
    used += qr;
    refreshes += refresh ? 1 : 0;
    out.push_back(k.index);
    if (shares) shares->push_back(share);
  }
}

namespace {

// Remaining saturated-group seconds of a request (see threshold.hpp for the same measure).
double work_s(const request_view& r, curve_cache& q, const step_cost_model& cost, int tp, const batch_totals& ref,
              double ref_s) {
  const auto m = marginal_step_cost(cost, tp, ref, ref_s, r.canvas_len(), r.block_len);
  const auto c = q.remaining_steps(r, r.tau);
  return c.refresh * m.refresh_s + c.reuse * m.reuse_s;
}


}  // namespace

std::vector<int> admit(const std::vector<request_view>& queued, admission_room room, double now,
                       const scheduler_config& cfg, const quality_model& q, double step_s,
                       const step_cost_model* cost, int tp, const std::vector<request_view>* active) {
  std::vector<int> out;
  if (queued.empty() || room.slots <= 0) return out;
  static thread_local std::vector<keyed> keys;  // reused: a decision runs one admission at a time
  order_indices(queued, now, cfg, q, step_s, keys, cost, tp);
  const bool control = cfg.admission_control && cfg.order == queue_order::least_slack && cost && active;
  std::vector<bool> allowed(queued.size(), true);
  bool deferred = false;
  if (control) {
    double mean_l = 0;
    for (const auto& r : queued) mean_l += r.canvas_len();
    for (const auto& r : *active) mean_l += r.canvas_len();
    mean_l /= static_cast<double>(queued.size() + active->size());
    const auto ref = saturated_batch(static_cast<int>(mean_l), queued.front().block_len, cfg.token_budget,
                                     q.steps_per_refresh(queued.front().block_len, queued.front().tau));
    const double ref_s = cost->step_seconds(tp, ref);
    // Moore-Hodgson on the EDF sequence of on-time active requests and on-time candidates:
    // whenever a prefix overruns its deadline, the candidate with the most work in it is
    // deferred. On one machine this keeps the largest number of jobs on time.
    struct job {
      double d, work;
      int cand;     // index into `queued`, -1 for an active request
      std::uint64_t id;
    };
    std::vector<job> jobs;
    curve_cache curve(q);
    solo_steps solo(*cost, tp);
    for (const auto& r : *active) {
      const double best = best_case_remaining_s(r, curve, solo);
      const double d = effective_deadline_s(r, now, best, cfg) - now;
      if (d >= best) jobs.push_back({d, work_s(r, curve, *cost, tp, ref, ref_s), -1, r.id});
    }
    for (const auto& k : keys) {
      if (k.late) continue;
      const auto& r = queued[static_cast<std::size_t>(k.index)];
      // Under chain slack the key is the effective deadline; otherwise the request's own.
      const double d = cfg.chain_slack ? k.value : r.deadline_s;
      jobs.push_back({d - now, work_s(r, curve, *cost, tp, ref, ref_s), k.index, r.id});
    }
    std::sort(jobs.begin(), jobs.end(), [](const job& a, const job& b) {
      return a.d != b.d ? a.d < b.d : a.id < b.id;
    });
    std::vector<const job*> kept;
    double w = 0;
    for (const auto& j : jobs) {
      kept.push_back(&j);
      w += j.work;
      if (w <= j.d) continue;
      auto worst = kept.end();  // ties: the latest deadline goes
      for (auto it = kept.begin(); it != kept.end(); ++it)
        if ((*it)->cand >= 0 && (worst == kept.end() || (*it)->work >= (*worst)->work)) worst = it;
      if (worst == kept.end()) continue;  // only running requests overrun: nothing to defer
      w -= (*worst)->work;
      allowed[static_cast<std::size_t>((*worst)->cand)] = false;
      deferred = true;
      kept.erase(worst);
    }
  }
  in_order ordered(keys);
  for (std::size_t n = 0; n < ordered.size(); ++n) {
    if (room.slots <= 0) break;
    const auto& k = ordered[n];
    const auto& r = queued[static_cast<std::size_t>(k.index)];
    if (control && !k.promoted && (k.late ? deferred : !allowed[static_cast<std::size_t>(k.index)])) continue;
    if (r.canvas_len() > room.kv_tokens) {
      // FCFS blocks behind the head (no overtaking); least slack lets smaller ones pass.
      if (cfg.order == queue_order::fcfs) break;
      continue;
    }
    room.slots -= 1;
    room.kv_tokens -= r.canvas_len();
    out.push_back(k.index);
  }
  return out;
}

std::vector<int> admit_to_group(const std::vector<request_view>& queued, admission_room room, double now,
                                const scheduler_config& cfg, const quality_model& q, double step_s,
                                const step_cost_model* cost, int tp, const std::vector<request_view>& active) {
  auto picked = admit(queued, room, now, cfg, q, step_s, cost, tp, &active);
  if (!picked.empty() || !active.empty() || room.slots <= 0 || queued.empty()) return picked;
  auto open = cfg;
  open.admission_control = false;
  room.kv_tokens = std::max(room.kv_tokens, static_cast<double>(queued.front().canvas_len()));
  picked = admit(queued, room, now, open, q, step_s, cost, tp, &active);
  if (picked.size() > 1) picked.resize(1);
  return picked;
}

double effective_deadline_s(const request_view& r, double now, double best_s, const scheduler_config& cfg) {
  const double late_by = now + best_s - r.deadline_s;
  if (late_by <= 0 || cfg.missed_renewal <= 0) return r.deadline_s;
  // One window is the request's own SLO budget (the client's tolerance for this request);
  // a microsecond floor keeps a zero budget from dividing by zero.
  const double window = cfg.missed_renewal * std::max(1e-6, r.deadline_s - r.arrival_s);
  return r.deadline_s + std::ceil(late_by / window) * window;
}

std::string refuse_if_late(const request_view& r, const std::vector<request_view>& active,
                           const std::vector<request_view>& queued, double now,
                           const scheduler_config& cfg, const quality_model& q,
                           const step_cost_model& cost, int tp, double tau_min) {
  const double left = r.deadline_s - now;
  curve_cache curve(q);
  solo_steps solo(cost, tp);
  const double alone = best_case_remaining_s(r, curve, solo, tau_min);
  char buf[200];
  if (alone > left) {
    std::snprintf(buf, sizeof buf, "cannot meet its deadline: %.3f s of steps alone at tau %.2f, %.3f s left",
                  alone, tau_min, std::max(0.0, left));
    return buf;
  }
  double mean_l = r.canvas_len();
  for (const auto& o : active) mean_l += o.canvas_len();
  for (const auto& o : queued) mean_l += o.canvas_len();
  mean_l /= static_cast<double>(1 + active.size() + queued.size());
  const auto ref = saturated_batch(static_cast<int>(mean_l), r.block_len, cfg.token_budget,
                                   q.steps_per_refresh(r.block_len, r.tau));
  const double ref_s = cost.step_seconds(tp, ref);
  request_view at_min = r;
  at_min.tau = tau_min;
  // Steps are batched: another request delays r only by the steps it shares with r, at most
  // r's own remaining steps of it; work it has left after that runs once r is done.
  const double r_steps = std::max(1.0, curve.remaining_steps(at_min, tau_min).total());
  double ahead = 0;
  auto count = [&](const request_view& o) {
    if (cfg.order == queue_order::least_slack) {
      const double best = best_case_remaining_s(o, curve, solo);
      const double d = cfg.demote_late ? effective_deadline_s(o, now, best, cfg) : o.deadline_s;
      if (d - now < best || d > r.deadline_s) return;  // late, or after r in deadline order
    }
    const double o_steps = std::max(1.0, curve.remaining_steps(o, o.tau).total());
    ahead += work_s(o, curve, cost, tp, ref, ref_s) * std::min(1.0, r_steps / o_steps);
  };
  for (const auto& o : active) count(o);
  for (const auto& o : queued) count(o);
  const double need = ahead + work_s(at_min, curve, cost, tp, ref, ref_s);
  if (need > left) {
    std::snprintf(buf, sizeof buf,
                  "cannot meet its deadline: the group owes %.3f s of work before it and it needs %.3f s, "
                  "%.3f s left",
                  ahead, need - ahead, std::max(0.0, left));
    return buf;
  }
  return {};
}

}  // namespace dls::policy
