#include "policies/threshold.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

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

}  // namespace

double tau_from_slack(const request_view& r, double now, const quality_model& q, double step_s,
                      const threshold_config& cfg) {
  return pick_tau(r, now, q, step_s, cfg, tau_levels(cfg));
}

cap_result load_cap(const std::vector<request_view>& reqs, const std::vector<double>& tau,
                    const std::vector<marginal_cost>& marg, double now, const quality_model& q,
                    double step_s, const threshold_config& cfg) {
  cap_result res;
  res.cap = cfg.tau_max;
  if (!cfg.load_cap || reqs.empty()) return res;
  std::vector<int> order;
  order.reserve(reqs.size());
  for (int i = 0; i < static_cast<int>(reqs.size()); ++i) {
    const auto& r = reqs[static_cast<std::size_t>(i)];
    const double budget = r.deadline_s - now;
    const bool hopeless = work_s(r, cfg.tau_min, marg[static_cast<std::size_t>(i)], q) > budget ||
                          remaining_steps(r, cfg.tau_min, q).total() * step_s > budget;
    if (hopeless)
      ++res.excluded;
    else
      order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const auto& ra = reqs[static_cast<std::size_t>(a)];
    const auto& rb = reqs[static_cast<std::size_t>(b)];
    return ra.deadline_s != rb.deadline_s ? ra.deadline_s < rb.deadline_s : ra.id < rb.id;
  });
  auto infeasible = [&](double c) {
    double w = 0;
    int bad = 0;
    for (int i : order) {
      const auto ui = static_cast<std::size_t>(i);
      w += work_s(reqs[ui], std::min(tau[ui], c), marg[ui], q);
      if (w > reqs[ui].deadline_s - now) ++bad;
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
                         std::vector<double>& tau_out) {
  tau_out.resize(reqs.size());
  const auto levels = tau_levels(cfg);
  for (std::size_t i = 0; i < reqs.size(); ++i) tau_out[i] = pick_tau(reqs[i], now, q, step_s, cfg, levels);
  auto cap = load_cap(reqs, tau_out, marg, now, q, step_s, cfg);
  for (auto& t : tau_out) t = std::min(t, cap.cap);
  return cap;
}

}  // namespace dls::policy
