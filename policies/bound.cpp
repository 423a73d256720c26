#include "policies/bound.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <queue>

namespace dls::policy {

double min_step_device_seconds(const step_cost_model& m, const step_item& it) {
  batch_totals t;
  t.add(it);
  if (m.kind() == step_cost_model::form::roofline) {
    const auto& p = m.roofline();
    const double flops = 2.0 * p.nonembed_params * t.query_rows + 4.0 * p.layers * p.d_model * t.qk +
                         2.0 * p.head_params * t.logit_rows;
    return flops / (p.peak_flops * p.flops_efficiency);
  }
  double best = std::numeric_limits<double>::infinity();
  for (const auto& [k, c] : m.linear()) {
    const double per = c.per_request_s + c.per_query_row_s * t.query_rows + c.per_key_row_s * t.key_rows +
                       c.per_qk_s * t.qk;
    best = std::min(best, k * per);
  }
  return std::isfinite(best) ? best : 0.0;
}

int min_block_steps(int masks, double max_tokens_per_step) {
  if (masks <= 0) return 0;
  const double m = std::max(1.0, max_tokens_per_step);
  auto lowest_plan = [&](int left) {
    return std::clamp(static_cast<int>(std::floor(std::max(1.0, left / m))), 1, left);
  };
  // f[M][s]: fewest steps for M masks left with s steps planned, when every step may first
  // re-plan to the lowest draw. Each step commits ceil(M / max(1, s)).
  const int n = masks;
  std::vector<std::vector<int>> f(static_cast<std::size_t>(n + 1), std::vector<int>(static_cast<std::size_t>(n + 1), 0));
  for (int left = 1; left <= n; ++left)
    for (int s = 0; s <= n; ++s) {
      auto after = [&](int plan) {
        const int se = std::max(1, plan);
        const int c = (left + se - 1) / se;
        return 1 + f[static_cast<std::size_t>(left - c)][static_cast<std::size_t>(std::min(n, se - 1))];
      };
      f[static_cast<std::size_t>(left)][static_cast<std::size_t>(s)] = std::min(after(s), after(lowest_plan(left)));
    }
  return f[static_cast<std::size_t>(n)][static_cast<std::size_t>(lowest_plan(n))];
}

double min_request_device_seconds(const step_cost_model& m, const quality_model& q, int prompt_len,
                                  int gen_len, int block_len, double tau_min, double tau_max,
                                  int decoded_blocks) {
  if (block_len <= 0 || gen_len <= 0) return 0.0;
  // Largest tokens per step over [tau_min, tau_max]: the curve is piecewise linear, so an
  // end or a measured point inside attains it.
  double mmax = std::max(q.tokens_per_step(tau_min), q.tokens_per_step(tau_max));
  for (const auto& p : q.points())
    if (p.tau >= tau_min && p.tau <= tau_max) mmax = std::max(mmax, q.tokens_per_step(p.tau));
  const int steps = min_block_steps(block_len, mmax);
  const int canvas = prompt_len + gen_len;
  const double refresh = min_step_device_seconds(m, step_item_of(step_kind::refresh, canvas, block_len));
  const double reuse = min_step_device_seconds(m, step_item_of(step_kind::reuse, canvas, block_len));
  const int all_blocks = gen_len / block_len;
  const double blocks = decoded_blocks > 0 ? std::min(decoded_blocks, all_blocks) : all_blocks;
  return blocks * (refresh + (steps - 1) * reuse);
}

namespace {

// Fenwick tree over ranks 1..n with counts and sums, for "how many of the cheapest present
// jobs fit in capacity C".
struct rank_tree {
  std::vector<double> sum;
  std::vector<int> cnt;
  int n = 0, log = 1;
  explicit rank_tree(int size) : sum(static_cast<std::size_t>(size + 1), 0.0), cnt(static_cast<std::size_t>(size + 1), 0), n(size) {
    while ((1 << log) <= n) ++log;
  }
  void clear() {
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(cnt.begin(), cnt.end(), 0);
  }
  void add(int rank, double w) {
    for (int i = rank; i <= n; i += i & -i) {
      sum[static_cast<std::size_t>(i)] += w;
      cnt[static_cast<std::size_t>(i)] += 1;
    }
  }
  // Largest number of present jobs, cheapest first, whose total work is <= cap.
  int fit(double cap) const {
    int pos = 0, k = 0;
    double acc = 0;
    for (int b = log; b >= 0; --b) {
      const int nxt = pos + (1 << b);
      if (nxt <= n && acc + sum[static_cast<std::size_t>(nxt)] <= cap) {
        pos = nxt;
        acc += sum[static_cast<std::size_t>(nxt)];
        k += cnt[static_cast<std::size_t>(nxt)];
      }
    }
    return k;
  }
};

// Fenwick tree for prefix maxima with "raise to at least" point updates.
struct max_tree {
  std::vector<long> v;
  explicit max_tree(int n) : v(static_cast<std::size_t>(n + 1), 0) {}
  void raise(int pos, long x) {
    for (int i = pos; i < static_cast<int>(v.size()); i += i & -i) v[static_cast<std::size_t>(i)] = std::max(v[static_cast<std::size_t>(i)], x);
  }
  long prefix(int pos) const {
    long best = 0;
    for (int i = pos; i > 0; i -= i & -i) best = std::max(best, v[static_cast<std::size_t>(i)]);
    return best;
  }
};

}  // namespace

std::size_t window_miss_bound(std::vector<bound_job> jobs, double devices, double max_window_s) {
  // A job with work and no time between its release and its deadline misses in every schedule
  // and takes nothing from the others; the sweep below, which opens windows at releases and
  // closes them at later deadlines, would never see it.
  const auto no_window = std::remove_if(jobs.begin(), jobs.end(),
                                        [](const bound_job& j) { return j.work_s > 0 && j.release_s >= j.deadline_s; });
  const auto forced = static_cast<std::size_t>(jobs.end() - no_window);
  jobs.erase(no_window, jobs.end());
  const int n = static_cast<int>(jobs.size());
  if (n == 0 || devices <= 0) return forced;
  // Deadline order (ties by release) for the sweep; ranks by work for the greedy.
  std::sort(jobs.begin(), jobs.end(), [](const bound_job& a, const bound_job& b) {
    return a.deadline_s != b.deadline_s ? a.deadline_s < b.deadline_s : a.release_s < b.release_s;
  });
  std::vector<int> by_work(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) by_work[static_cast<std::size_t>(i)] = i;
  std::sort(by_work.begin(), by_work.end(), [&](int a, int b) {
    const auto& ja = jobs[static_cast<std::size_t>(a)];
    const auto& jb = jobs[static_cast<std::size_t>(b)];
    return ja.work_s != jb.work_s ? ja.work_s < jb.work_s : a < b;
  });
  std::vector<int> rank(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) rank[static_cast<std::size_t>(by_work[static_cast<std::size_t>(r)])] = r + 1;
  std::vector<double> starts;
  starts.reserve(static_cast<std::size_t>(n));
  for (const auto& j : jobs) starts.push_back(j.release_s);
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());

  // best(t) = most forced misses with every window ending by t, kept at deadline positions.
  max_tree best(n);
  rank_tree tree(n);
  long overall = 0;
  for (double a : starts) {
    // Windows ending at or before a: deadlines <= a are positions 1..p.
    const int p = static_cast<int>(std::upper_bound(jobs.begin(), jobs.end(), a,
                                                    [](double t, const bound_job& j) { return t < j.deadline_s; }) -
                                   jobs.begin());
    const long before = best.prefix(p);
    tree.clear();
    int inside = 0;
    for (int i = p; i < n; ++i) {
      const auto& j = jobs[static_cast<std::size_t>(i)];
      if (max_window_s > 0 && j.deadline_s - a > max_window_s) break;
      if (j.release_s < a) continue;
      tree.add(rank[static_cast<std::size_t>(i)], j.work_s);
      ++inside;
      const long miss = inside - tree.fit(devices * (j.deadline_s - a));
      if (miss <= 0) continue;
      best.raise(i + 1, before + miss);
      overall = std::max(overall, before + miss);
    }
  }
  return forced + static_cast<std::size_t>(overall);
}

std::size_t pooled_edf_on_time(std::vector<bound_job> jobs, double devices) {
  if (jobs.empty() || devices <= 0) return 0;
  std::sort(jobs.begin(), jobs.end(), [](const bound_job& a, const bound_job& b) {
    return a.release_s != b.release_s ? a.release_s < b.release_s : a.deadline_s < b.deadline_s;
  });
  struct live {
    double deadline, rem;
  };
  std::vector<live> pending;  // sorted by deadline
  double now = jobs.front().release_s;
  std::size_t on_time = 0;
  auto advance = [&](double until) {
    // EDF on the pooled machine: the earliest deadline runs at full speed.
    std::size_t done = 0;
    while (done < pending.size() && now < until) {
      auto& j = pending[done];
      const double t_fin = now + j.rem / devices;
      if (t_fin <= until) {
        now = t_fin;
        if (now <= j.deadline * (1 + 1e-12) + 1e-12) ++on_time;
        ++done;
      } else {
        j.rem -= (until - now) * devices;
        now = until;
      }
    }
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(done));
    now = std::max(now, until);
  };
  std::vector<char> drop;
  for (const auto& j : jobs) {
    advance(j.release_s);
    const auto at = std::upper_bound(pending.begin(), pending.end(), j.deadline_s,
                                     [](double d, const live& l) { return d < l.deadline; });
    pending.insert(at, live{j.deadline_s, j.work_s});
    // Moore-Hodgson on the pending set: whenever a deadline prefix overruns, give up the
    // job with the most remaining work in it.
    drop.assign(pending.size(), 0);
    std::priority_queue<std::pair<double, std::size_t>> heap;
    double cum = 0;
    bool any = false;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      cum += pending[i].rem;
      heap.push({pending[i].rem, i});
      if (cum > devices * (pending[i].deadline - now) * (1 + 1e-12)) {
        const auto worst = heap.top();
        heap.pop();
        cum -= worst.first;
        drop[worst.second] = 1;
        any = true;
      }
    }
    if (any) {
      std::size_t w = 0;
      for (std::size_t i = 0; i < pending.size(); ++i)
        if (!drop[i]) pending[w++] = pending[i];
      pending.resize(w);
    }
  }
  advance(std::numeric_limits<double>::infinity());
  return on_time;
}

}  // namespace dls::policy
