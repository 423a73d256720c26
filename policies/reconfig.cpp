#include "policies/reconfig.hpp"

#include "policies/predict.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>

namespace dls::policy {

std::vector<partition> enumerate_partitions(int devices, std::vector<int> degrees) {
  std::sort(degrees.begin(), degrees.end(), std::greater<int>());
  degrees.erase(std::unique(degrees.begin(), degrees.end()), degrees.end());
  std::vector<partition> out;
  partition cur;
  // Parts are emitted in non-increasing order, so each multiset appears exactly once.
  std::function<void(int, std::size_t)> rec = [&](int left, std::size_t from) {
    if (left == 0) {
      out.push_back(cur);
      return;
    }
    for (std::size_t i = from; i < degrees.size(); ++i) {
      if (degrees[i] > left || degrees[i] < 1) continue;
      cur.push_back(degrees[i]);
      rec(left - degrees[i], i);
      cur.pop_back();
    }
  };
  rec(devices, 0);
  return out;
}

group_perf evaluate_group(const step_cost_model& m, const quality_model& q,
                          const std::vector<length_class>& mix, int tp, double tau,
                          const reconfig_config& cfg) {
  group_perf gp;
  gp.tp = tp;
  gp.tau = tau;
  if (mix.empty()) return gp;
  constexpr int block = 32;
  double wsum = 0, mean_l = 0, mean_l2 = 0;
  for (const auto& c : mix) wsum += c.weight;
  // Per class: the utilisation up to which it still meets its deadline (processor sharing).
  std::vector<std::pair<double, double>> rho_w;  // (rho_c, weight)
  std::vector<double> blocks(mix.size());
  for (std::size_t i = 0; i < mix.size(); ++i) {
    const auto& c = mix[i];
    const double l = c.prompt_len + c.gen_len;
    const double w = c.weight / wsum;
    mean_l += w * l;
    mean_l2 += w * l * l;
    // The group's share of the window: the path overhead is paid outside the group, unscaled.
    const double o = std::max(0.0, cfg.request_overhead_s);
    const double d = cfg.slo_scale * (isolated_latency_s(m, q, c.prompt_len, c.gen_len, block, cfg.ref_tau, 1) + o) - o;
    const double lat = isolated_latency_s(m, q, c.prompt_len, c.gen_len, block, tau, tp);
    gp.latency_s += w * lat;
    rho_w.push_back({d > 0 ? 1.0 - lat / d : -1.0, w});
    blocks[i] = static_cast<double>(c.gen_len / block);
  }
  std::sort(rho_w.begin(), rho_w.end(), std::greater<>());
  double acc = 0;
  for (const auto& [rho, w] : rho_w) {
    acc += w;
    if (acc + 1e-12 >= cfg.attainment_target) {
      gp.rho_star = std::max(0.0, rho);
      break;
    }
  }
  // Saturated throughput: the best b / (mean latency at batch b) within memory.
  const double spb = q.steps_for(block, tau);
  const double spr = q.steps_per_refresh(block, tau);
  const double kv_cap = m.kv_capacity_tokens(tp);
  for (int b = 1; b <= cfg.max_batch; ++b) {
    if (b * mean_l > kv_cap) break;
    group_load g;
    g.requests = b;
    g.sum_canvas = b * mean_l;
    g.sum_canvas_sq = b * mean_l2;
    const double step = expected_step_s(m, tp, g, block, spr, cfg.token_budget);
    double mean_latency = 0;
    for (std::size_t i = 0; i < mix.size(); ++i) mean_latency += mix[i].weight / wsum * blocks[i] * spb * step;
    const double thr = mean_latency > 0 ? b / mean_latency : 0;
    if (thr > gp.max_rps * (1.0 + 1e-9)) {
      gp.max_rps = thr;
      gp.batch = b;
    }
  }
  gp.capacity_rps = gp.max_rps * std::min(gp.rho_star, cfg.utilization_max);
  return gp;
}

namespace {

struct option {
  double capacity = 0;
  double weighted_latency = 0;   // sum over groups of C_g l_g
};

option evaluate_partition(const partition& p, const std::map<int, group_perf>& perf) {
  option o;
  for (int tp : p) {
    const auto& g = perf.at(tp);
    o.capacity += g.capacity_rps;
    o.weighted_latency += g.capacity_rps * g.latency_s;
  }
  return o;
}

// Predicted mean latency of a layout with total SLO capacity c and sum C_g l_g = wl.
double mean_latency_j(double wl, double c, double lambda) {
  if (c <= 0 || lambda >= c) return std::numeric_limits<double>::infinity();
  return (wl / c) / (1.0 - lambda / c);
}

// Saturated throughput of a node's partition: the sum of its groups' mu.
double throughput(const partition& p, const std::map<int, group_perf>& perf) {
  double mu = 0;
  for (int tp : p) mu += perf.at(tp).max_rps;
  return mu;
}

// Sustained overload: each node independently takes the partition of most saturated throughput
// (ties keep its current partition); throughput is a sum over nodes, so this is exact.
reconfig_plan most_throughput_plan(const std::vector<int>& node_devices, const std::vector<partition>& current,
                                   std::map<int, std::vector<partition>>& parts_by_size,
                                   const std::map<int, group_perf>& perf, double lambda, double tau) {
  reconfig_plan plan;
  plan.tau = tau;
  plan.demand_rps = lambda;
  plan.feasible = false;
  plan.latency_score = std::numeric_limits<double>::infinity();
  plan.current_score = plan.latency_score;
  for (std::size_t i = 0; i < node_devices.size(); ++i) {
    const auto& parts = parts_by_size[node_devices[i]];
    const partition* best = nullptr;
    double best_val = -1;
    for (const auto& p : parts) {
      const double val = throughput(p, perf);
      const bool cur = i < current.size() && current[i] == p;
      if (val > best_val * (1.0 + 1e-9) || (cur && val >= best_val * (1.0 - 1e-9))) {
        best = &p;
        best_val = val;
      }
    }
    plan.nodes.push_back(*best);
    for (int tp : *best) plan.capacity_rps += perf.at(tp).capacity_rps;
    if (i < current.size() && !current[i].empty() && current[i] != *best) ++plan.changed_nodes;
  }
  plan.switch_layout = plan.changed_nodes > 0 || current.size() != node_devices.size();
  return plan;
}

// A burst: the plan with the most SLO capacity among the layouts whose saturated throughput
// is at least `mu_required`. Exact dynamic program over nodes on throughput, in `units` steps of
// mu_required / units with each partition's throughput rounded down (so a plan found does keep
// up), cells capped at the requirement; each cell keeps the most SLO capacity reaching it.
// False when no layout reaches the requirement.
bool most_capacity_keeping_up(const std::vector<int>& node_devices, const std::vector<partition>& current,
                              std::map<int, std::vector<partition>>& parts_by_size,
                              const std::map<int, group_perf>& perf, double mu_required, int units,
                              reconfig_plan& plan) {
  const std::size_t n = node_devices.size();
  const double unit = mu_required / units;
  const double none = -std::numeric_limits<double>::infinity();
  std::vector<std::vector<int>> w(n);
  std::vector<std::vector<double>> val(n);
  double cmax = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (const auto& p : parts_by_size[node_devices[i]]) {
      const auto o = evaluate_partition(p, perf);
      const double mu = throughput(p, perf);
      w[i].push_back(unit > 0 ? static_cast<int>(std::min<double>(units, std::floor(mu / unit + 1e-9))) : units);
      val[i].push_back(o.capacity);
      cmax = std::max(cmax, o.capacity);
    }
  // Ties keep a node's current partition (as stage 2 does), so equivalent nodes are not permuted.
  const double keep_bonus = 1e-9 * (cmax > 0 ? cmax : 1.0);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& parts = parts_by_size[node_devices[i]];
    for (std::size_t k = 0; k < parts.size(); ++k)
      if (i < current.size() && current[i] == parts[k]) val[i][k] += keep_bonus;
  }
  std::vector<std::vector<double>> best(n + 1, std::vector<double>(static_cast<std::size_t>(units + 1), none));
  best[0][0] = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (int u = 0; u <= units; ++u) {
      const double base = best[i][static_cast<std::size_t>(u)];
      if (base == none) continue;
      for (std::size_t k = 0; k < w[i].size(); ++k) {
        auto& cell = best[i + 1][static_cast<std::size_t>(std::min(units, u + w[i][k]))];
        cell = std::max(cell, base + val[i][k]);
      }
    }
  if (best[n][static_cast<std::size_t>(units)] == none) return false;
  plan.nodes.assign(n, {});
  plan.capacity_rps = 0;
  plan.changed_nodes = 0;
  int v = units;
  for (std::size_t i = n; i-- > 0;) {
    const auto& parts = parts_by_size[node_devices[i]];
    const double target = best[i + 1][static_cast<std::size_t>(v)];
    bool found = false;
    // Deterministic: the first option (in enumeration order) that reproduces the optimum.
    for (std::size_t k = 0; k < parts.size() && !found; ++k)
      for (int u = 0; u <= units; ++u) {
        const double prev = best[i][static_cast<std::size_t>(u)];
        if (prev == none || std::min(units, u + w[i][k]) != v || prev + val[i][k] != target) continue;
        plan.nodes[i] = parts[k];
        plan.capacity_rps += evaluate_partition(parts[k], perf).capacity;
        if (i < current.size() && !current[i].empty() && current[i] != parts[k]) ++plan.changed_nodes;
        v = u;
        found = true;
        break;
      }
  }
  return true;
}

// Overload beyond every SLO-feasible layout (reconfig.hpp). A layout keeps up with the
// sustained rate when its saturated throughput at utilization_max covers it; one that does not
// builds a backlog that never drains, whatever SLO capacity it has. A burst over a rate some
// layout keeps up with maximizes the SLO capacity (predicted attainment min(1, C / lambda))
// among the layouts that keep up; beyond that (sustained overload) the saturated throughput.
reconfig_plan overload_plan(const std::vector<int>& node_devices, const std::vector<partition>& current,
                            std::map<int, std::vector<partition>>& parts_by_size,
                            const std::map<int, group_perf>& perf, double lambda, double mean_rate,
                            double tau, const reconfig_config& cfg) {
  auto thr = most_throughput_plan(node_devices, current, parts_by_size, perf, lambda, tau);
  double mu = 0;
  for (const auto& p : thr.nodes) mu += throughput(p, perf);
  const double u_max = std::clamp(cfg.utilization_max, 1e-6, 1.0);
  const bool have_current =
      current.size() == node_devices.size() &&
      std::none_of(current.begin(), current.end(), [](const partition& p) { return p.empty(); });
  double mu_cur = 0, mu_changed = 0;
  auto throughput_of = [&](const std::vector<partition>& nodes) {
    mu_cur = mu_changed = 0;
    for (std::size_t i = 0; i < current.size(); ++i) {
      const double mu_i = throughput(current[i], perf);
      mu_cur += mu_i;
      if (current[i] != nodes[i]) mu_changed += mu_i;
    }
  };
  reconfig_plan plan;
  const bool keeps_up = mean_rate < u_max * mu &&
                        most_capacity_keeping_up(node_devices, current, parts_by_size, perf, mean_rate / u_max,
                                                 std::max(1, cfg.capacity_units), plan);
  if (!keeps_up) {
    // Sustained: the backlog grows whatever the layout, so every request/s of throughput is
    // used, and a regroup pays if the throughput gained over the horizon exceeds the
    // throughput its waves take away (the burst test with every capacity below the load).
    if (thr.changed_nodes > 0 && have_current) {
      throughput_of(thr.nodes);
      thr.switch_layout = switch_pays(std::max(mean_rate, mu), mu_cur, 0, mu, 0, thr.changed_nodes, mu_changed, 0,
                                       true, cfg);
    }
    return thr;
  }
  plan.tau = tau;
  plan.demand_rps = lambda;
  plan.feasible = false;
  plan.burst = true;
  plan.latency_score = plan.current_score = std::numeric_limits<double>::infinity();
  if (!have_current) {
    plan.switch_layout = true;
    return plan;
  }
  if (plan.changed_nodes == 0) return plan;
  throughput_of(plan.nodes);
  if (mean_rate >= u_max * mu_cur) {
    // The current layout does not keep up and the plan does: what the current one loses is
    // throughput, so the regroup must repay the throughput its waves take away, against the rate
    // a layout must serve to keep up (the sustained test). A forecast from a few seconds of
    // arrivals is evidence for as long (horizon_s), which a regroup rarely repays.
    double mu_new = 0;
    for (const auto& p : plan.nodes) mu_new += throughput(p, perf);
    plan.switch_layout = switch_pays(mean_rate / u_max, mu_cur, 0, mu_new, 0, plan.changed_nodes, mu_changed, 0, true, cfg);
    return plan;
  }
  double cur_c = 0, changed_c = 0;
  for (std::size_t i = 0; i < current.size(); ++i)
    for (int tp : current[i]) {
      cur_c += perf.at(tp).capacity_rps;
      if (current[i] != plan.nodes[i]) changed_c += perf.at(tp).capacity_rps;
    }
  plan.switch_layout = switch_pays(lambda, cur_c, 0, plan.capacity_rps, 0, plan.changed_nodes, changed_c, 0, true, cfg);
  return plan;
}

}  // namespace

bool switch_pays(double lambda, double c_cur, double wl_cur, double c_new, double wl_new, int changed,
                 double c_changed, double wl_changed, bool burst, const reconfig_config& cfg) {
  if (changed <= 0) return false;
  const int at_once = cfg.nodes_at_once > 0 ? std::min(cfg.nodes_at_once, changed) : changed;
  const int waves = (changed + at_once - 1) / at_once;
  const double t = waves * std::max(0.0, cfg.regroup_s);
  // One wave takes at_once of the changed nodes away; their share of what the changed hold.
  const double share = static_cast<double>(at_once) / changed;
  const double c_wave = std::max(0.0, c_cur - share * c_changed);
  const double wl_wave = std::max(0.0, wl_cur - share * wl_changed);
  if (burst) {
    if (!(lambda > 0)) return c_new > c_cur;
    auto att = [&](double c) { return std::min(1.0, c / lambda); };
    return cfg.horizon_s * (att(c_new) - att(c_cur)) > t * (att(c_cur) - att(c_wave));
  }
  // No load: the regroup delays nobody, and every later request gains.
  if (!(lambda > 0)) return c_new > 0 && (c_cur <= 0 || wl_new / c_new < wl_cur / c_cur * (1 - 1e-9));
  const double j_cur = mean_latency_j(wl_cur, c_cur, lambda);
  const double j_new = mean_latency_j(wl_new, c_new, lambda);
  const double gain = lambda * cfg.horizon_s * (j_cur - j_new);
  double cost = 0;
  if (lambda < c_wave) {
    cost = lambda * t * std::max(0.0, mean_latency_j(wl_wave, c_wave, lambda) - j_cur);
  } else {
    // The reduced layout falls behind: the excess waits through the waves, then drains.
    const double excess = (lambda - c_wave) * t;
    if (c_new <= lambda) return false;
    cost = excess * (t / 2 + excess / (2 * (c_new - lambda)));
  }
  return gain > cost;
}

reconfig_plan optimize_layout(const std::vector<int>& node_devices,
                              const std::vector<partition>& current, const forecast& load,
                              const step_cost_model& m, const quality_model& q,
                              const reconfig_config& cfg) {
  const int n_nodes = static_cast<int>(node_devices.size());
  std::vector<int> degrees = m.tp_degrees();
  std::map<int, std::vector<partition>> parts_by_size;
  for (int d : node_devices)
    if (!parts_by_size.count(d)) parts_by_size[d] = enumerate_partitions(d, degrees);
  const double lambda = load.arrival_rate;
  const int units = std::max(1, cfg.capacity_units);
  const double inf = std::numeric_limits<double>::infinity();
  auto levels = cfg.tau_levels;
  if (levels.empty()) levels.push_back(cfg.ref_tau);
  auto is_current = [&](int i, const partition& p) {
    return static_cast<std::size_t>(i) < current.size() && current[static_cast<std::size_t>(i)] == p;
  };

  reconfig_plan fallback;
  for (std::size_t li = 0; li < levels.size(); ++li) {
    const double tau = levels[li];
    std::map<int, group_perf> perf;
    for (int tp : degrees) perf[tp] = evaluate_group(m, q, load.mix, tp, tau, cfg);
    std::vector<std::vector<option>> opts(static_cast<std::size_t>(n_nodes));
    double cmax = 0;
    for (int i = 0; i < n_nodes; ++i) {
      double best = 0;
      for (const auto& p : parts_by_size[node_devices[static_cast<std::size_t>(i)]]) {
        opts[static_cast<std::size_t>(i)].push_back(evaluate_partition(p, perf));
        best = std::max(best, opts[static_cast<std::size_t>(i)].back().capacity);
      }
      cmax += best;
    }
    const double unit = cmax > 0 ? cmax / units : 1.0;
    // A tiny preference for a node's current partition makes ties keep the layout, so the
    // plan does not permute equivalent nodes; the real switching cost is applied after.
    const double keep_bonus = 1e-9 * (cmax > 0 ? cmax : 1.0);
    std::vector<std::vector<int>> cu(static_cast<std::size_t>(n_nodes));
    std::vector<std::vector<double>> cost(static_cast<std::size_t>(n_nodes));
    for (int i = 0; i < n_nodes; ++i) {
      const auto& parts = parts_by_size[node_devices[static_cast<std::size_t>(i)]];
      for (std::size_t k = 0; k < parts.size(); ++k) {
        const auto& o = opts[static_cast<std::size_t>(i)][k];
        cu[static_cast<std::size_t>(i)].push_back(static_cast<int>(std::floor(o.capacity / unit + 1e-9)));
        cost[static_cast<std::size_t>(i)].push_back(o.weighted_latency + (is_current(i, parts[k]) ? 0.0 : keep_bonus));
      }
    }
    // fwd[i][u]: least sum of C_g l_g over nodes < i with total capacity u units. All rows are
    // kept so the optimum can be backtracked without storing choices.
    std::vector<std::vector<double>> fwd(static_cast<std::size_t>(n_nodes + 1),
                                         std::vector<double>(static_cast<std::size_t>(units + 1), inf));
    fwd[0][0] = 0;
    for (int i = 0; i < n_nodes; ++i) {
      const auto& c = cost[static_cast<std::size_t>(i)];
      const auto& w = cu[static_cast<std::size_t>(i)];
      const auto& cur = fwd[static_cast<std::size_t>(i)];
      auto& nxt = fwd[static_cast<std::size_t>(i + 1)];
      for (int u = 0; u <= units; ++u) {
        const double base = cur[static_cast<std::size_t>(u)];
        if (base == inf) continue;
        for (std::size_t k = 0; k < c.size(); ++k) {
          auto& cell = nxt[static_cast<std::size_t>(std::min(units, u + w[k]))];
          cell = std::min(cell, base + c[k]);
        }
      }
    }
    const auto& last_row = fwd[static_cast<std::size_t>(n_nodes)];
    int end = -1;
    double best_j = inf;
    for (int u = 0; u <= units; ++u) {
      if (last_row[static_cast<std::size_t>(u)] == inf) continue;
      const double c = u * unit;
      if (c + 1e-12 < lambda) continue;
      const double j = lambda > 0 ? mean_latency_j(last_row[static_cast<std::size_t>(u)], c, lambda)
                                  : (c > 0 ? last_row[static_cast<std::size_t>(u)] / c : inf);
      if (j < best_j) {
        best_j = j;
        end = u;
      }
    }
    const bool last = li + 1 == levels.size();
    const bool feasible = end >= 0 && best_j < inf;
    if (!feasible && !last) continue;
    if (!feasible)
      return overload_plan(node_devices, current, parts_by_size, perf, lambda,
                           load.mean_rate < 0 ? lambda : load.mean_rate, tau, cfg);
    reconfig_plan plan;
    plan.tau = tau;
    plan.demand_rps = lambda;
    plan.feasible = feasible;
    plan.nodes.assign(static_cast<std::size_t>(n_nodes), {});
    double wl = 0;
    int v = end;
    for (int i = n_nodes - 1; i >= 0; --i) {
      const auto& c = cost[static_cast<std::size_t>(i)];
      const auto& w = cu[static_cast<std::size_t>(i)];
      const auto& parts = parts_by_size[node_devices[static_cast<std::size_t>(i)]];
      const double target = fwd[static_cast<std::size_t>(i + 1)][static_cast<std::size_t>(v)];
      bool found = false;
      // Deterministic: the first option (in enumeration order) that reproduces the optimum.
      for (std::size_t k = 0; k < c.size() && !found; ++k)
        for (int u = 0; u <= units; ++u) {
          const double prev = fwd[static_cast<std::size_t>(i)][static_cast<std::size_t>(u)];
          if (prev == inf || std::min(units, u + w[k]) != v || prev + c[k] != target) continue;
          plan.nodes[static_cast<std::size_t>(i)] = parts[k];
          plan.capacity_rps += opts[static_cast<std::size_t>(i)][k].capacity;
          wl += opts[static_cast<std::size_t>(i)][k].weighted_latency;
          v = u;
          found = true;
          break;
        }
    }
    plan.latency_score = lambda > 0 ? mean_latency_j(wl, plan.capacity_rps, lambda)
                                    : (plan.capacity_rps > 0 ? wl / plan.capacity_rps : inf);
    // The current layout's score at this tau, for the hysteresis test.
    double cur_c = 0, cur_wl = 0, changed_c = 0, changed_wl = 0;
    bool have_current = current.size() == static_cast<std::size_t>(n_nodes);
    for (int i = 0; i < n_nodes && have_current; ++i) {
      const auto& p = current[static_cast<std::size_t>(i)];
      if (p.empty()) {
        have_current = false;
        break;
      }
      const auto o = evaluate_partition(p, perf);
      cur_c += o.capacity;
      cur_wl += o.weighted_latency;
      if (p != plan.nodes[static_cast<std::size_t>(i)]) {
        changed_c += o.capacity;
        changed_wl += o.weighted_latency;
      }
    }
    plan.current_score = !have_current ? inf
                         : lambda > 0 ? (cur_c + 1e-12 >= lambda ? mean_latency_j(cur_wl, cur_c, lambda) : inf)
                                      : (cur_c > 0 ? cur_wl / cur_c : inf);
    for (int i = 0; i < n_nodes; ++i)
      if (!is_current(i, plan.nodes[static_cast<std::size_t>(i)]) && have_current) ++plan.changed_nodes;
    if (!have_current) {
      plan.switch_layout = true;
    } else if (plan.changed_nodes > 0) {
      plan.switch_layout = plan.current_score == inf
                               ? plan.capacity_rps > cur_c
                               : switch_pays(lambda, cur_c, cur_wl, plan.capacity_rps, wl, plan.changed_nodes,
                                             changed_c, changed_wl, false, cfg);
    }
    return plan;
  }
  return fallback;
}

int nodes_at_once(double max_fraction, std::size_t nodes) {
  return std::max(1, static_cast<int>(max_fraction * static_cast<double>(nodes)));
}

std::vector<int> nodes_to_drain(const std::vector<drain_candidate>& nodes, int at_once) {
  std::vector<std::pair<std::size_t, int>> ready;  // (held, node): ties go to the earlier node
  for (std::size_t n = 0; n < nodes.size(); ++n)
    if (nodes[n].changes && nodes[n].may_change) ready.push_back({nodes[n].held, static_cast<int>(n)});
  std::sort(ready.begin(), ready.end());
  std::vector<int> out;
  for (const auto& [held, n] : ready) {
    if (static_cast<int>(out.size()) >= at_once) break;
    out.push_back(n);
  }
  return out;
}

}  // namespace dls::policy
