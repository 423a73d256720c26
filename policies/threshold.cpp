#include "policies/threshold.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <utility>

namespace dls::policy {

std::vector<double> tau_levels(const threshold_config& cfg) {
  std::vector<double> out;
  // Round to 1e-9 so 0.9 - 4 x 0.05 lands on 0.7 exactly and tests can compare levels.
  for (int i = 0;; ++i) {
    double t = std::round((cfg.tau_max - i * cfg.tau_step) * 1e9) / 1e9;
    if (t < cfg.tau_min - 1e-12) break;
    out.push_back(t);
    if (cfg.tau_step <= 0) break;
  }
  if (out.empty() || out.back() > cfg.tau_min + 1e-12) out.push_back(cfg.tau_min);
  return out;
}

std::vector<double> planning_tau_levels(const threshold_config& cfg, const quality_model& q) {
  std::vector<double> out;
  for (double tau : tau_levels(cfg))
    if (cfg.accuracy_budget < 0 || accuracy_loss(q, tau, cfg.tau_max) <= cfg.accuracy_budget + 1e-12 || out.empty())
      out.push_back(tau);
  return out;
}

namespace {

// Every request's remaining steps at every level, read at most once per control. The controller
// weighs each request at several taus (its own, the hopeless test, each cap it tries, the
// budget's lowerings). A request of the same progress as the one before it shares its row: a
// queue's requests mostly have nothing done yet. Entries are read when first asked for (most
// requests find their tau at the first level). A tau off the levels (a pinned one, a floor) is
// read through the cache.
class level_steps {
 public:
  level_steps(const std::vector<request_view>& reqs, const std::vector<double>& levels, curve_cache& q)
      : reqs_(reqs), levels_(levels), q_(q), row_(reqs.size()) {
    // A long list also shares rows between requests apart (its active ones, its queue's lengths);
    // for a short one the map would cost more than the rows it saves.
    std::unordered_map<std::uint64_t, std::size_t> seen;
    const bool long_list = reqs.size() > long_list_size;
    std::optional<std::uint64_t> last;
    std::size_t rows = 0;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      const auto key = progress_key(reqs[i]);
      if (key && key == last) {
        row_[i] = row_[i - 1];
        continue;
      }
      last = key;
      if (long_list && key) {
        const auto [it, fresh] = seen.emplace(*key, rows * levels.size());
        row_[i] = it->second;
        if (!fresh) continue;
      } else {
        row_[i] = rows * levels.size();
      }
      ++rows;
    }
    counts_.assign(rows * levels.size(), step_counts{-1.0, -1.0});  // refresh < 0: not read yet
  }
  step_counts at_level(std::size_t i, std::size_t level) const {
    auto& c = counts_[row_[i] + level];
    if (c.refresh < 0) c = q_.remaining_steps(reqs_[i], levels_[level]);
    return c;
  }
  step_counts at(std::size_t i, double tau) const {
    for (std::size_t l = 0; l < levels_.size(); ++l)
      if (levels_[l] == tau) return at_level(i, l);
    return q_.remaining_steps(reqs_[i], tau);
  }
  const std::vector<request_view>& requests() const { return reqs_; }

 private:
  // What remaining_steps reads of a request, packed; none when a field does not fit 16 bits.
  static std::optional<std::uint64_t> progress_key(const request_view& r) {
    const int blocks_left = std::max(0, r.blocks_total() - r.blocks_done);
    const int masks = r.steps_in_block > 0 ? r.masks_left_in_block : 0;  // read only inside a block
    const int f[4] = {r.block_len, blocks_left, r.steps_in_block, masks};
    std::uint64_t k = 0;
    for (int v : f) {
      if (v < 0 || v > 0xFFFF) return std::nullopt;
      k = (k << 16) | static_cast<std::uint64_t>(v);
    }
    return k;
  }
  static constexpr std::size_t long_list_size = 64;  // requests; measured on replayed live decisions
  const std::vector<request_view>& reqs_;
  const std::vector<double>& levels_;
  curve_cache& q_;
  std::vector<std::size_t> row_;             // request -> its row's first entry in counts_
  mutable std::vector<step_counts> counts_;  // rows of levels_.size() entries
};

double pick_tau(const level_steps& steps, std::size_t i, double now, double step_s, const threshold_config& cfg,
                const std::vector<double>& levels) {
  if (!cfg.per_request) return cfg.tau_max;
  const double budget = steps.requests()[i].deadline_s - now;
  for (std::size_t l = 0; l < levels.size(); ++l)
    if (steps.at_level(i, l).total() * step_s <= budget) return levels[l];
  return cfg.tau_min;
}

double work_s(const step_counts& c, const marginal_cost& m) { return c.refresh * m.refresh_s + c.reuse * m.reuse_s; }

double work_s(const request_view& r, double tau, const marginal_cost& m, curve_cache& q) {
  return work_s(q.remaining_steps(r, tau), m);
}

// Misses even alone at tau_min: left out of the cap's test, served last by the budget.
bool hopeless(const level_steps& steps, std::size_t i, const marginal_cost& m, double now, double step_s,
              const threshold_config& cfg) {
  const double budget = steps.requests()[i].deadline_s - now;
  const auto c = steps.at(i, cfg.tau_min);
  return work_s(c, m) > budget || c.total() * step_s > budget;
}

std::vector<char> hopeless_ones(const level_steps& steps, const std::vector<marginal_cost>& marg, double now,
                                double step_s, const threshold_config& cfg) {
  std::vector<char> out(steps.requests().size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = hopeless(steps, i, marg[i], now, step_s, cfg);
  return out;
}

// accuracy_loss and accuracy_ledger::planned, on any reader of the curve's accuracy.
template <class Accuracy>
double loss_with(Accuracy&& accuracy, double tau, double tau_ref) {
  // At or above the reference nothing is lost, even where the curve dips (tau 1 is one token
  // per step, whose measured accuracy may lie a hair below the reference's).
  if (tau >= tau_ref) return 0.0;
  return std::max(0.0, accuracy(tau_ref) - accuracy(tau));
}

template <class Accuracy>
double planned_with(Accuracy&& accuracy, const request_view& r, double tau, double tau_ref) {
  if (r.gen_len <= 0 || uncommitted_tokens(r) == 0) return 0.0;
  return loss_with(accuracy, std::min(tau, r.tau_low), tau_ref) - loss_with(accuracy, r.tau_low, tau_ref);
}

// The ledger's planned losses of a control's requests: each request's charge so far and the
// loss at every level read once (the budget weighs a lowered request at each level between its
// tau and its target), the same figures as accuracy_ledger::planned.
class planned_losses {
 public:
  planned_losses(const std::vector<request_view>& reqs, const std::vector<double>& levels, double tau_ref,
                 curve_cache& q)
      : levels_(levels), tau_ref_(tau_ref), q_(q) {
    level_loss_.reserve(levels.size());
    for (double t : levels) level_loss_.push_back(loss(t));
    charged_.reserve(reqs.size());
    for (const auto& r : reqs) charged_.push_back(r.gen_len > 0 && uncommitted_tokens(r) > 0 ? loss(r.tau_low) : closed);
  }
  /// accuracy_ledger::planned(reqs[i], tau).
  double operator()(const request_view& r, std::size_t i, double tau) const {
    if (charged_[i] == closed) return 0.0;
    return loss(std::min(tau, r.tau_low)) - charged_[i];
  }
  /// The same at levels[level].
  double at_level(const request_view& r, std::size_t i, std::size_t level) const {
    if (charged_[i] == closed) return 0.0;
    return (levels_[level] <= r.tau_low ? level_loss_[level] : loss(r.tau_low)) - charged_[i];
  }

 private:
  double loss(double tau) const {
    if (tau >= tau_ref_) return 0.0;  // as loss_with
    // While the constructor fills level_loss_, only the levels read so far are in it.
    for (std::size_t l = 0; l < levels_.size() && l < level_loss_.size(); ++l)
      if (levels_[l] == tau) return level_loss_[l];
    return loss_with([&](double t) { return q_.accuracy(t); }, tau, tau_ref_);
  }
  const std::vector<double>& levels_;
  double tau_ref_;
  curve_cache& q_;
  static constexpr double closed = -1;  // nothing left to commit: nothing planned
  std::vector<double> level_loss_;
  std::vector<double> charged_;  // loss(tau_low) of each request, or `closed`
};

// Limits each request's change from its current tau to `tau_out` by the ledger's credit and
// moves the reservations: raises (refunds) first, then lowerings for on-time requests in
// deadline order, hopeless ones last; each goes to the lowest level in [target, current) it
// can afford, or stays where it is.
void spend_budget(const level_steps& steps, const std::vector<char>& lost, curve_cache& q,
                  const std::vector<double>& levels, std::vector<double>& tau_out, accuracy_ledger& ledger) {
  constexpr double eps = 1e-12;
  const auto& reqs = steps.requests();
  const planned_losses planned(reqs, levels, ledger.tau_ref, q);
  struct lowering {
    int hopeless;
    double deadline_s;
    std::uint64_t id;
    int index;  // into reqs
  };
  std::vector<lowering> lower;
  lower.reserve(reqs.size());
  for (int i = 0; i < static_cast<int>(reqs.size()); ++i) {
    const auto ui = static_cast<std::size_t>(i);
    const auto& r = reqs[ui];
    if (r.tau_pinned || tau_out[ui] >= r.tau - eps)
      ledger.reserved += planned(r, ui, tau_out[ui]) - planned(r, ui, r.tau);
    else
      lower.push_back({lost[ui] ? 1 : 0, r.deadline_s, r.id, i});
  }
  std::sort(lower.begin(), lower.end(), [](const lowering& a, const lowering& b) {
    if (a.hopeless != b.hopeless) return a.hopeless < b.hopeless;
    return a.deadline_s != b.deadline_s ? a.deadline_s < b.deadline_s : a.id < b.id;
  });
  // Breadth first: every request that wants it goes down one level before any goes down two.
  // A level saves fewer steps per point of accuracy the lower it is (tokens per step is
  // concave in the loss on the shipped curve), so spreading the credit buys the most steps.
  std::vector<double> target(reqs.size());
  std::vector<double> now_planned(reqs.size());  // planned(r, tau_out) of the lowered ones
  for (const auto& li : lower) {
    const auto ui = static_cast<std::size_t>(li.index);
    target[ui] = tau_out[ui];
    tau_out[ui] = reqs[ui].tau;
    now_planned[ui] = planned(reqs[ui], ui, tau_out[ui]);
  }
  for (std::size_t l = 0; l < levels.size(); ++l) {
    const double t = levels[l];
    for (const auto& li : lower) {
      const auto ui = static_cast<std::size_t>(li.index);
      const auto& r = reqs[ui];
      if (t >= tau_out[ui] - eps || t < target[ui] - eps) continue;
      const double at_t = planned.at_level(r, ui, l);
      const double extra = at_t - now_planned[ui];
      if (extra > ledger.credit() + eps) continue;
      ledger.reserved += extra;
      tau_out[ui] = t;
      now_planned[ui] = at_t;
    }
  }
}

}  // namespace

double accuracy_loss(const quality_model& q, double tau, double tau_ref) {
  return loss_with([&](double t) { return q.accuracy(t); }, tau, tau_ref);
}

int uncommitted_tokens(const request_view& r) {
  int left = r.gen_len - r.blocks_done * r.block_len;
  if (r.steps_in_block > 0) left -= r.block_len - r.masks_left_in_block;
  return std::max(0, left);
}

double accuracy_ledger::planned(const request_view& r, double tau, const quality_model& q) const {
  return planned_with([&](double t) { return q.accuracy(t); }, r, tau, tau_ref);
}

void accuracy_ledger::enter(const request_view& r, const quality_model& q) {
  if (!enabled()) return;
  reserved += planned(r, r.tau, q);
}

void accuracy_ledger::finish() {
  if (!enabled()) return;
  earned += budget;
  finished += 1;
}

double accuracy_ledger::commit(const request_view& r, int tokens, double tau, const quality_model& q) {
  if (tokens <= 0) return r.tau_low;
  const double low = std::min(tau, r.tau_low);
  if (enabled()) {
    const double x = accuracy_loss(q, low, tau_ref) - accuracy_loss(q, r.tau_low, tau_ref);
    spent += x;
    reserved -= x;
  }
  return low;
}

void accuracy_ledger::restart() {
  earned = spent + reserved;
  finished = 0;
}

void accuracy_ledger::leave(const request_view& r, const quality_model& q) {
  if (!enabled()) return;
  reserved -= planned(r, r.tau, q);
}

double tau_from_slack(const request_view& r, double now, const quality_model& q, double step_s,
                      const threshold_config& cfg) {
  curve_cache c(q);
  const std::vector<request_view> one{r};
  const auto levels = tau_levels(cfg);
  return pick_tau(level_steps(one, levels, c), 0, now, step_s, cfg, levels);
}

arrival_demand demand_from_arrivals(const std::vector<arrival_record>& arrivals, double now_s,
                                    const forecast_config& fc, const step_cost_model& cost, int tp,
                                    const batch_totals& ref, int block_len, const quality_model& q,
                                    const threshold_config& cfg) {
  arrival_demand d;
  d.levels = tau_levels(cfg);
  if (fc.window_s <= 0) return d;
  std::vector<std::pair<double, std::size_t>> by_window;  // (SLO window, index)
  double seen = 0;
  for (std::size_t i = arrivals.size(); i-- > 0;) {
    const auto& a = arrivals[i];
    if (now_s - a.t_s >= fc.window_s) break;
    if (a.t_s > now_s) continue;
    seen += 1;
    if (a.window_s > 0 && a.gen_len > 0) by_window.push_back({a.window_s, i});
  }
  if (by_window.empty()) return d;
  d.rate = seen / fc.window_s;
  std::sort(by_window.begin(), by_window.end());
  d.work_s.assign(d.levels.size(), std::vector<double>(by_window.size(), 0.0));
  curve_cache curve(q);
  const double ref_s = cost.step_seconds(tp, ref);
  for (std::size_t k = 0; k < by_window.size(); ++k) {
    const auto& a = arrivals[by_window[k].second];
    d.window_s.push_back(by_window[k].first);
    request_view r;  // the request as it arrives: nothing done yet
    r.prompt_len = a.prompt_len;
    r.gen_len = a.gen_len;
    r.block_len = block_len;
    const auto m = marginal_step_cost(cost, tp, ref, ref_s, r.canvas_len(), block_len);
    for (std::size_t l = 0; l < d.levels.size(); ++l) d.work_s[l][k] = work_s(r, d.levels[l], m, curve);
  }
  return d;
}

double predicted_utilization(const arrival_demand& d, double tau) {
  if (d.empty() || d.work_s.empty()) return 0.0;
  std::size_t best = 0;
  for (std::size_t l = 1; l < d.levels.size(); ++l)
    if (std::abs(d.levels[l] - tau) < std::abs(d.levels[best] - tau)) best = l;
  double sum = 0;
  for (double w : d.work_s[best]) sum += w;
  return d.rate * sum / static_cast<double>(d.work_s[best].size());
}

void load_forecast::record(const arrival_record& a) {
  arrivals.push_back(a);
  changed = true;
}

const arrival_demand& load_forecast::update(double now_s, const step_cost_model& cost, int tp,
                                            const batch_totals& ref, int block_len, const quality_model& q,
                                            const threshold_config& thr) {
  std::size_t old = 0;
  while (old < arrivals.size() && now_s - arrivals[old].t_s >= cfg.window_s) ++old;
  if (old > 0) arrivals.erase(arrivals.begin(), arrivals.begin() + static_cast<std::ptrdiff_t>(old));
  // An emptied window means no demand at once; otherwise new arrivals show within refresh_s.
  const bool due = (changed && now_s - computed_s >= refresh_s) || (arrivals.empty() && !demand.empty());
  if (!due) return demand;
  demand = demand_from_arrivals(arrivals, now_s, cfg, cost, tp, ref, block_len, q, thr);
  computed_s = now_s;
  changed = false;
  return demand;
}

namespace {

cap_result cap_of(const level_steps& steps, const std::vector<char>& lost, const std::vector<double>& tau,
                  const std::vector<marginal_cost>& marg, double now, const threshold_config& cfg,
                  const std::vector<double>& levels, const arrival_demand* demand) {
  const auto& reqs = steps.requests();
  cap_result res;
  res.cap = cfg.tau_max;
  if (!cfg.load_cap || reqs.empty()) return res;
  std::vector<int> order;
  order.reserve(reqs.size());
  for (int i = 0; i < static_cast<int>(reqs.size()); ++i) {
    if (lost[static_cast<std::size_t>(i)])
      ++res.excluded;
    else
      order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const auto& ra = reqs[static_cast<std::size_t>(a)];
    const auto& rb = reqs[static_cast<std::size_t>(b)];
    return ra.deadline_s != rb.deadline_s ? ra.deadline_s < rb.deadline_s : ra.id < rb.id;
  });
  const bool predicted = demand && !demand->empty();
  const double per_sample = predicted ? demand->rate / static_cast<double>(demand->window_s.size()) : 0.0;
  auto infeasible = [&](double c) {
    // Predicted arrivals at the cap's level: samples with windows shorter than T fall due
    // before T; with them in window order, sum (T - D_k) w_k = T s1 - s2 over those.
    const std::vector<double>* pw = nullptr;
    if (predicted)
      for (std::size_t l = 0; l < demand->levels.size(); ++l)
        if (std::abs(demand->levels[l] - c) < 1e-9) pw = &demand->work_s[l];
    std::size_t k = 0;
    double s1 = 0, s2 = 0;
    double w = 0;
    int bad = 0;
    for (int i : order) {
      const auto ui = static_cast<std::size_t>(i);
      const auto& r = reqs[ui];
      const double t = r.tau_pinned ? tau[ui] : std::max(r.tau_floor, std::min(tau[ui], c));
      w += work_s(steps.at(ui, t), marg[ui]);
      const double left = reqs[ui].deadline_s - now;
      double ahead = 0;
      if (pw) {
        for (; k < demand->window_s.size() && demand->window_s[k] < left; ++k) {
          s1 += (*pw)[k];
          s2 += demand->window_s[k] * (*pw)[k];
        }
        ahead = per_sample * (left * s1 - s2);
      }
      if (w + ahead > left) ++bad;
    }
    // Past the last deadline present the test's left side grows at rate lambda x mean w(c)
    // and the right side at 1: arrivals above the capacity at c make every horizon far enough
    // infeasible. Counted as one more prefix, so a cap that only this rules out comes down,
    // and an overload no level fixes (this prefix fails at tau_min too) changes nothing.
    if (pw) {
      double all = 0;
      for (double x : *pw) all += x;
      if (per_sample * all > 1.0) ++bad;
    }
    return bad;
  };
  const int floor_bad = infeasible(cfg.tau_min);
  // Work grows with tau, so the infeasible count is monotone in c: scan from the top.
  for (double c : levels) {
    const int bad = c == cfg.tau_min ? floor_bad : infeasible(c);
    if (bad <= floor_bad) {
      res.cap = c;
      res.infeasible_prefixes = bad;
      return res;
    }
  }
  res.cap = cfg.tau_min;
  res.infeasible_prefixes = floor_bad;
  return res;
}

}  // namespace

cap_result load_cap(const std::vector<request_view>& reqs, const std::vector<double>& tau,
                    const std::vector<marginal_cost>& marg, double now, const quality_model& q,
                    double step_s, const threshold_config& cfg, const arrival_demand* demand) {
  curve_cache c(q);
  const auto levels = tau_levels(cfg);
  const level_steps steps(reqs, levels, c);
  return cap_of(steps, hopeless_ones(steps, marg, now, step_s, cfg), tau, marg, now, cfg, levels, demand);
}

cap_result control_group(const std::vector<request_view>& reqs,
                         const std::vector<marginal_cost>& marg, double now,
                         const quality_model& q, double step_s, const threshold_config& cfg,
                         std::vector<double>& tau_out, accuracy_ledger* ledger,
                         const arrival_demand* demand) {
  tau_out.resize(reqs.size());
  const auto levels = tau_levels(cfg);
  curve_cache curve(q);
  const level_steps steps(reqs, levels, curve);
  for (std::size_t i = 0; i < reqs.size(); ++i)
    tau_out[i] = reqs[i].tau_pinned ? reqs[i].tau
                                    : std::max(reqs[i].tau_floor, pick_tau(steps, i, now, step_s, cfg, levels));
  const bool budget = ledger && ledger->enabled();
  const auto lost = cfg.load_cap || budget ? hopeless_ones(steps, marg, now, step_s, cfg) : std::vector<char>(reqs.size());
  auto cap = cap_of(steps, lost, tau_out, marg, now, cfg, levels, demand);
  for (std::size_t i = 0; i < reqs.size(); ++i)
    if (!reqs[i].tau_pinned)
      tau_out[i] = std::max(reqs[i].tau_floor, std::min({tau_out[i], cap.cap, reqs[i].tau_low}));
  if (budget) spend_budget(steps, lost, curve, levels, tau_out, *ledger);
  return cap;
}

}  // namespace dls::policy
