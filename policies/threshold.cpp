#include "policies/threshold.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
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

double pick_tau(const request_view& r, double now, const quality_model& q, double step_s,
                const threshold_config& cfg, const std::vector<double>& levels) {
  if (!cfg.per_request) return cfg.tau_max;
  const double budget = r.deadline_s - now;
  for (double t : levels)
    if (remaining_steps(r, t, q).total() * step_s <= budget) return t;
  return cfg.tau_min;
}

double work_s(const request_view& r, double tau, const marginal_cost& m, const quality_model& q) {
  const auto c = remaining_steps(r, tau, q);
  return c.refresh * m.refresh_s + c.reuse * m.reuse_s;
}

// Misses even alone at tau_min: left out of the cap's test, served last by the budget.
bool hopeless(const request_view& r, const marginal_cost& m, double now, const quality_model& q,
              double step_s, const threshold_config& cfg) {
  const double budget = r.deadline_s - now;
  return work_s(r, cfg.tau_min, m, q) > budget ||
         remaining_steps(r, cfg.tau_min, q).total() * step_s > budget;
}

// Limits each request's change from its current tau to `tau_out` by the ledger's credit and
// moves the reservations: raises (refunds) first, then lowerings for on-time requests in
// deadline order, hopeless ones last; each goes to the lowest level in [target, current) it
// can afford, or stays where it is.
void spend_budget(const std::vector<request_view>& reqs, const std::vector<marginal_cost>& marg,
                  double now, const quality_model& q, double step_s, const threshold_config& cfg,
                  const std::vector<double>& levels, std::vector<double>& tau_out,
                  accuracy_ledger& ledger) {
  constexpr double eps = 1e-12;
  std::vector<std::pair<int, int>> lower;  // (hopeless, index)
  for (int i = 0; i < static_cast<int>(reqs.size()); ++i) {
    const auto ui = static_cast<std::size_t>(i);
    const auto& r = reqs[ui];
    if (r.tau_pinned || tau_out[ui] >= r.tau - eps)
      ledger.reserved += ledger.planned(r, tau_out[ui], q) - ledger.planned(r, r.tau, q);
    else
      lower.push_back({hopeless(r, marg[ui], now, q, step_s, cfg) ? 1 : 0, i});
  }
  std::sort(lower.begin(), lower.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    const auto& ra = reqs[static_cast<std::size_t>(a.second)];
    const auto& rb = reqs[static_cast<std::size_t>(b.second)];
    return ra.deadline_s != rb.deadline_s ? ra.deadline_s < rb.deadline_s : ra.id < rb.id;
  });
  // Breadth first: every request that wants it goes down one level before any goes down two.
  // A level saves fewer steps per point of accuracy the lower it is (tokens per step is
  // concave in the loss on the shipped curve), so spreading the credit buys the most steps.
  std::vector<double> target(reqs.size());
  for (const auto& li : lower) {
    const auto ui = static_cast<std::size_t>(li.second);
    target[ui] = tau_out[ui];
    tau_out[ui] = reqs[ui].tau;
  }
  for (double t : levels) {
    for (const auto& li : lower) {
      const auto ui = static_cast<std::size_t>(li.second);
      const auto& r = reqs[ui];
      if (t >= tau_out[ui] - eps || t < target[ui] - eps) continue;
      const double extra = ledger.planned(r, t, q) - ledger.planned(r, tau_out[ui], q);
      if (extra > ledger.credit() + eps) continue;
      ledger.reserved += extra;
      tau_out[ui] = t;
    }
  }
}

}  // namespace

double accuracy_loss(const quality_model& q, double tau, double tau_ref) {
  // At or above the reference nothing is lost, even where the curve dips (tau 1 is one token
  // per step, whose measured accuracy may lie a hair below the reference's).
  if (tau >= tau_ref) return 0.0;
  return std::max(0.0, q.accuracy(tau_ref) - q.accuracy(tau));
}

int uncommitted_tokens(const request_view& r) {
  int left = r.gen_len - r.blocks_done * r.block_len;
  if (r.steps_in_block > 0) left -= r.block_len - r.masks_left_in_block;
  return std::max(0, left);
}

double accuracy_ledger::planned(const request_view& r, double tau, const quality_model& q) const {
  if (r.gen_len <= 0 || uncommitted_tokens(r) == 0) return 0.0;
  return accuracy_loss(q, std::min(tau, r.tau_low), tau_ref) - accuracy_loss(q, r.tau_low, tau_ref);
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
  return pick_tau(r, now, q, step_s, cfg, tau_levels(cfg));
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
  for (std::size_t k = 0; k < by_window.size(); ++k) {
    const auto& a = arrivals[by_window[k].second];
    d.window_s.push_back(by_window[k].first);
    request_view r;  // the request as it arrives: nothing done yet
    r.prompt_len = a.prompt_len;
    r.gen_len = a.gen_len;
    r.block_len = block_len;
    const auto m = marginal_step_cost(cost, tp, ref, r.canvas_len(), block_len);
    for (std::size_t l = 0; l < d.levels.size(); ++l) d.work_s[l][k] = work_s(r, d.levels[l], m, q);
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

cap_result load_cap(const std::vector<request_view>& reqs, const std::vector<double>& tau,
                    const std::vector<marginal_cost>& marg, double now, const quality_model& q,
                    double step_s, const threshold_config& cfg, const arrival_demand* demand) {
  cap_result res;
  res.cap = cfg.tau_max;
  if (!cfg.load_cap || reqs.empty()) return res;
  std::vector<int> order;
  order.reserve(reqs.size());
  for (int i = 0; i < static_cast<int>(reqs.size()); ++i) {
    const auto& r = reqs[static_cast<std::size_t>(i)];
    if (hopeless(r, marg[static_cast<std::size_t>(i)], now, q, step_s, cfg))
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
      w += work_s(r, t, marg[ui], q);
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
  const auto levels = tau_levels(cfg);
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

cap_result control_group(const std::vector<request_view>& reqs,
                         const std::vector<marginal_cost>& marg, double now,
                         const quality_model& q, double step_s, const threshold_config& cfg,
                         std::vector<double>& tau_out, accuracy_ledger* ledger,
                         const arrival_demand* demand) {
  tau_out.resize(reqs.size());
  const auto levels = tau_levels(cfg);
  for (std::size_t i = 0; i < reqs.size(); ++i)
    tau_out[i] = reqs[i].tau_pinned ? reqs[i].tau : std::max(reqs[i].tau_floor, pick_tau(reqs[i], now, q, step_s, cfg, levels));
  auto cap = load_cap(reqs, tau_out, marg, now, q, step_s, cfg, demand);
  for (std::size_t i = 0; i < reqs.size(); ++i)
    if (!reqs[i].tau_pinned)
      tau_out[i] = std::max(reqs[i].tau_floor, std::min({tau_out[i], cap.cap, reqs[i].tau_low}));
  if (ledger && ledger->enabled())
    spend_budget(reqs, marg, now, q, step_s, cfg, levels, tau_out, *ledger);
  return cap;
}

}  // namespace dls::policy
