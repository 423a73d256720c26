#include "policies/step_cost.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace dls::policy {

step_item step_item_of(step_kind kind, int canvas_len, int block_len) {
  step_item it;
  it.kind = kind;
  it.key_rows = canvas_len;
  it.query_rows = kind == step_kind::refresh ? canvas_len : block_len;
  it.logit_rows = block_len;
  return it;
}

step_item refresh_chunk(int canvas_len, int block_len, double share, bool completes, double begin) {
  step_item it = step_item_of(step_kind::refresh, canvas_len, block_len);
  it.layer_begin = std::clamp(begin, 0.0, 1.0);
  it.layer_share = std::clamp(share, 0.0, 1.0 - it.layer_begin);
  if (!completes) it.logit_rows = 0;
  return it;
}

step_item next_step_item(const request_view& r) {
  if (r.next_kind == step_kind::refresh && r.refresh_done > 0)
    return refresh_chunk(r.canvas_len(), r.block_len, 1.0 - r.refresh_done, true, r.refresh_done);
  return step_item_of(r.next_kind, r.canvas_len(), r.block_len);
}

bool completes_step(const request_view& r, double share) {
  // Shares are whole multiples of 1 / refresh_split; the tolerance absorbs their rounding.
  return r.next_kind != step_kind::refresh || r.refresh_done + share >= 1.0 - 1e-9;
}

step_item step_item_for(const request_view& r, double share) {
  if (completes_step(r, share)) return next_step_item(r);
  return refresh_chunk(r.canvas_len(), r.block_len, share, false,
                       r.next_kind == step_kind::refresh ? r.refresh_done : 0.0);
}

void batch_totals::add(const step_item& it) {
  const double s = it.layer_share;
  requests += 1;
  query_rows += it.query_rows * s;
  key_rows += it.key_rows * s;
  qk += static_cast<double>(it.query_rows) * it.key_rows * s;
  logit_rows += it.logit_rows;
  if (it.kind == step_kind::refresh) refresh_items += 1;
  if (s < 1.0) parts.push_back(it);
}

void batch_totals::remove(const step_item& it) {
  const double s = it.layer_share;
  requests -= 1;
  query_rows -= it.query_rows * s;
  key_rows -= it.key_rows * s;
  qk -= static_cast<double>(it.query_rows) * it.key_rows * s;
  logit_rows -= it.logit_rows;
  if (it.kind == step_kind::refresh) refresh_items -= 1;
  if (s < 1.0) {
    const auto p = std::find(parts.begin(), parts.end(), it);
    if (p != parts.end()) parts.erase(p);
  }
}

double batch_totals::layer_fraction() const {
  if (requests - static_cast<double>(parts.size()) > 0.5) return 1.0;  // some item runs every layer
  // Union of the ranges: sort by start and merge.
  std::vector<std::pair<double, double>> r;
  r.reserve(parts.size());
  for (const auto& p : parts) r.push_back({p.layer_begin, p.layer_begin + p.layer_share});
  std::sort(r.begin(), r.end());
  double covered = 0, end = 0;
  for (const auto& [b, e] : r) {
    const double from = std::max(b, end);
    if (e > from) covered += e - from;
    end = std::max(end, e);
  }
  return std::min(1.0, covered);
}

// -- model ------------------------------------------------------------------------------------

step_cost_model step_cost_model::make_roofline(const roofline_params& p,
                                               std::vector<int> tp_degrees) {
  step_cost_model m;
  m.form_ = form::roofline;
  m.roof_ = p;
  std::sort(tp_degrees.begin(), tp_degrees.end());
  m.tps_ = std::move(tp_degrees);
  m.memory.weight_bytes = p.weight_bytes;
  m.memory.kv_bytes_per_token = p.kv_bytes_per_token;
  return m;
}

step_cost_model step_cost_model::make_linear(std::map<int, linear_coeffs> coeffs) {
  step_cost_model m;
  m.form_ = form::linear;
  for (auto& [tp, c] : coeffs) {
    if (tp < 1 || tp >= static_cast<int>(m.lin_fast_.size()))
      throw std::invalid_argument("step cost: tp degree out of range");
    m.tps_.push_back(tp);
    m.lin_fast_[static_cast<std::size_t>(tp)] = c;
  }
  m.lin_ = std::move(coeffs);
  return m;
}

step_cost_model with_step_overhead(const step_cost_model& m, int tp, double extra_s) {
  step_cost_model out;
  if (m.kind() == step_cost_model::form::linear) {
    auto coeffs = m.linear();
    if (auto it = coeffs.find(tp); it != coeffs.end()) it->second.fixed_s += extra_s;
    out = step_cost_model::make_linear(std::move(coeffs));
  } else {
    auto p = m.roofline();
    p.step_overhead_s += extra_s;
    out = step_cost_model::make_roofline(p, m.tp_degrees());
  }
  out.hardware = m.hardware;
  out.model = m.model;
  out.source = m.source;
  out.memory = m.memory;
  return out;
}

bool step_cost_model::supports(int tp) const {
  return std::find(tps_.begin(), tps_.end(), tp) != tps_.end();
}

double step_cost_model::step_seconds(int tp, const batch_totals& t) const {
  if (t.requests <= 0) return 0.0;
  if (form_ == form::linear) {
    const auto& c = lin_fast_[static_cast<std::size_t>(tp)];
    return c.fixed_s * t.layer_fraction() + c.per_request_s * t.requests + c.per_query_row_s * t.query_rows +
           c.per_key_row_s * t.key_rows + c.per_qk_s * t.qk +
           c.per_refresh_step_s * std::clamp(t.refresh_items, 0.0, 1.0);
  }
  if (t.parts.empty()) {
    const auto w = roofline_parts(tp, t);
    return std::max(w.compute_s, w.memory_s) + w.fixed_s;
  }
  const auto& p = roof_;
  const double k = tp;
  double layers = 1.0;  // fraction of the layers run: only those some range covers
  const double body_s = layered_body_s(t, k * p.peak_flops * p.flops_efficiency,
                                       k * p.hbm_bytes_per_s * p.bandwidth_efficiency,
                                       2.0 * p.head_params * t.logit_rows, layers);
  return body_s + fixed_seconds(tp, t.query_rows, layers);
}

step_parts step_cost_model::roofline_parts(int tp, const batch_totals& t) const {
  if (form_ != form::roofline) throw std::logic_error("step cost: roofline_parts needs a roofline profile");
  const auto& p = roof_;
  const double k = tp;
  // Linear layers over the query rows, attention scores and values (QK^T and PV, 2 FLOPs
  // each per head dim per layer), and the LM head on the block rows only.
  const double flops = 2.0 * p.nonembed_params * t.query_rows + 4.0 * p.layers * p.d_model * t.qk +
                       2.0 * p.head_params * t.logit_rows;
  const double bytes = p.weight_bytes + p.kv_bytes_per_token * t.key_rows;
  step_parts w;
  w.compute_s = flops / (k * p.peak_flops * p.flops_efficiency);
  w.memory_s = bytes / (k * p.hbm_bytes_per_s * p.bandwidth_efficiency);
  w.fixed_s = fixed_seconds(tp, t.query_rows, 1.0);
  return w;
}

double step_cost_model::fixed_seconds(int tp, double query_rows, double layers) const {
  const auto& p = roof_;
  const double k = tp;
  double comm_s = 0.0;
  if (tp > 1) {
    // Megatron TP: one all-reduce after attention and one after the MLP, per layer. A ring
    // moves 2 (k-1)/k of the activation bytes over each device's link.
    const double ar_bytes = query_rows * p.d_model * p.activation_bytes;
    comm_s = 2.0 * p.layers * (layers * p.allreduce_latency_s) +
             2.0 * p.layers * 2.0 * (k - 1.0) / k * ar_bytes / p.link_bytes_per_s;
  }
  return comm_s + p.step_overhead_s;
}

double step_cost_model::layered_body_s(const batch_totals& t, double flop_rate, double byte_rate,
                                       double head_flops, double& layers_run) const {
  // A step runs its layers in order, and a layer's weight read overlaps only that layer's
  // compute. So with layer ranges in the batch the roofline is taken per segment between the
  // ranges' ends: max(FLOPs / rate, bytes / rate) of the items that run those layers. A
  // range in a memory-bound step rides free only up to the read time of its own layers.
  const auto& p = roof_;
  auto full_flops = [&](double q, double qk) { return 2.0 * p.nonembed_params * q + 4.0 * p.layers * p.d_model * qk; };
  double q_whole = t.query_rows, k_whole = t.key_rows, qk_whole = t.qk;
  std::vector<double> cuts{0.0, 1.0};
  for (const auto& it : t.parts) {
    q_whole -= it.query_rows * it.layer_share;
    k_whole -= it.key_rows * it.layer_share;
    qk_whole -= static_cast<double>(it.query_rows) * it.key_rows * it.layer_share;
    cuts.push_back(it.layer_begin);
    cuts.push_back(it.layer_begin + it.layer_share);
  }
  const bool whole = t.requests - static_cast<double>(t.parts.size()) > 0.5;
  std::sort(cuts.begin(), cuts.end());
  constexpr double eps = 1e-9;
  // Per running segment: compute and memory seconds. The LM head follows the last layer any
  // item runs, so its FLOPs join the last running segment.
  std::vector<std::pair<double, double>> seg;
  layers_run = 0.0;
  for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
    const double x0 = cuts[c], x1 = cuts[c + 1], w = x1 - x0;
    if (w <= eps) continue;
    bool runs = whole;
    // Full-depth totals of the items that run this segment; the segment is w of them.
    double flops = whole ? full_flops(std::max(0.0, q_whole), std::max(0.0, qk_whole)) : 0.0;
    double kv = whole ? std::max(0.0, k_whole) : 0.0;
    for (const auto& it : t.parts) {
      if (it.layer_begin > x0 + eps || it.layer_begin + it.layer_share < x1 - eps) continue;
      runs = true;
      flops += full_flops(it.query_rows, static_cast<double>(it.query_rows) * it.key_rows);
      kv += it.key_rows;
    }
    if (!runs) continue;  // no item runs these layers: their weights are not read
    layers_run += w;
    seg.push_back({w * flops / flop_rate, w * (p.weight_bytes + p.kv_bytes_per_token * kv) / byte_rate});
  }
  if (!seg.empty()) seg.back().first += head_flops / flop_rate;
  double body = 0.0;
  for (const auto& [compute, memory] : seg) body += std::max(compute, memory);
  return body;
}

double step_cost_model::step_seconds(int tp, const std::vector<step_item>& items) const {
  batch_totals t;
  for (const auto& it : items) t.add(it);
  return step_seconds(tp, t);
}

double step_cost_model::kv_capacity_tokens(int tp) const {
  const auto& m = memory;
  if (m.kv_bytes_per_token <= 0 || m.device_bytes <= 0) return 1e18;  // unknown: unbounded
  const double free_bytes = m.device_bytes - m.weight_bytes - m.reserve_bytes;
  return std::max(0.0, free_bytes) * tp / m.kv_bytes_per_token;
}

// -- fitting ----------------------------------------------------------------------------------

namespace {

// Solves the normal equations of A restricted to the columns in `cols` (Gaussian elimination
// with partial pivoting; n <= 5 here so this is exact enough and cheap).
std::vector<double> least_squares_on(const std::vector<double>& a, const std::vector<double>& y,
                                     int m, int n, const std::vector<int>& cols) {
  const int p = static_cast<int>(cols.size());
  std::vector<double> g(static_cast<std::size_t>(p * (p + 1)), 0.0);
  auto at = [&](int r, int c) -> double& { return g[static_cast<std::size_t>(r * (p + 1) + c)]; };
  for (int i = 0; i < m; ++i) {
    for (int r = 0; r < p; ++r) {
      const double ar = a[static_cast<std::size_t>(i * n + cols[r])];
      for (int c = 0; c < p; ++c) at(r, c) += ar * a[static_cast<std::size_t>(i * n + cols[c])];
      at(r, p) += ar * y[static_cast<std::size_t>(i)];
    }
  }
  for (int c = 0; c < p; ++c) {
    int piv = c;
    for (int r = c + 1; r < p; ++r)
      if (std::fabs(at(r, c)) > std::fabs(at(piv, c))) piv = r;
    for (int k = 0; k <= p; ++k) std::swap(at(c, k), at(piv, k));
    if (std::fabs(at(c, c)) < 1e-300) continue;  // singular column: leave its weight at 0
    for (int r = 0; r < p; ++r) {
      if (r == c) continue;
      const double f = at(r, c) / at(c, c);
      for (int k = c; k <= p; ++k) at(r, k) -= f * at(c, k);
    }
  }
  std::vector<double> s(static_cast<std::size_t>(n), 0.0);
  for (int r = 0; r < p; ++r)
    s[static_cast<std::size_t>(cols[r])] = std::fabs(at(r, r)) < 1e-300 ? 0.0 : at(r, p) / at(r, r);
  return s;
}

}  // namespace

std::vector<double> nnls(const std::vector<double>& a, const std::vector<double>& y, int m, int n) {
  std::vector<double> x(static_cast<std::size_t>(n), 0.0);
  std::vector<bool> passive(static_cast<std::size_t>(n), false);
  auto gradient = [&] {
    std::vector<double> w(static_cast<std::size_t>(n), 0.0);
    for (int i = 0; i < m; ++i) {
      double r = y[static_cast<std::size_t>(i)];
      for (int j = 0; j < n; ++j) r -= a[static_cast<std::size_t>(i * n + j)] * x[static_cast<std::size_t>(j)];
      for (int j = 0; j < n; ++j) w[static_cast<std::size_t>(j)] += a[static_cast<std::size_t>(i * n + j)] * r;
    }
    return w;
  };
  for (int outer = 0; outer < 3 * n + 3; ++outer) {
    auto w = gradient();
    int best = -1;
    double best_w = 1e-12;
    for (int j = 0; j < n; ++j)
      if (!passive[static_cast<std::size_t>(j)] && w[static_cast<std::size_t>(j)] > best_w) {
        best = j;
        best_w = w[static_cast<std::size_t>(j)];
      }
    if (best < 0) break;
    passive[static_cast<std::size_t>(best)] = true;
    for (int inner = 0; inner < 3 * n + 3; ++inner) {
      std::vector<int> cols;
      for (int j = 0; j < n; ++j)
        if (passive[static_cast<std::size_t>(j)]) cols.push_back(j);
      auto s = least_squares_on(a, y, m, n, cols);
      bool all_pos = true;
      for (int j : cols)
        if (s[static_cast<std::size_t>(j)] <= 0) all_pos = false;
      if (all_pos) {
        x = s;
        break;
      }
      // Step from x toward s until the first passive weight reaches zero, then drop it.
      double alpha = 1.0;
      for (int j : cols) {
        const auto uj = static_cast<std::size_t>(j);
        if (s[uj] <= 0) alpha = std::min(alpha, x[uj] / (x[uj] - s[uj]));
      }
      for (int j = 0; j < n; ++j) {
        const auto uj = static_cast<std::size_t>(j);
        x[uj] += alpha * (s[uj] - x[uj]);
        if (passive[uj] && x[uj] <= 1e-15) {
          passive[uj] = false;
          x[uj] = 0;
        }
      }
    }
  }
  return x;
}

std::array<double, 6> profile_features(const profile_sample& s) {
  const double b = s.batch;
  if (s.refreshing < 0)
    return {1.0, b, b * s.query_rows, b * s.key_rows, b * static_cast<double>(s.query_rows) * s.key_rows,
            s.kind == step_kind::refresh ? 1.0 : 0.0};
  const double r = s.refreshing, l = s.key_rows, q = s.query_rows;
  return {1.0, b, r * l + (b - r) * q, b * l, r * l * l + (b - r) * q * l, r > 0 ? 1.0 : 0.0};
}

std::map<int, linear_coeffs> fit_linear_step_cost(const std::vector<profile_sample>& samples,
                                                  std::vector<fit_report>* report) {
  std::map<int, std::vector<const profile_sample*>> by_tp;
  for (const auto& s : samples) {
    if (s.seconds <= 0 || s.batch < 1 || s.refreshing > s.batch) throw std::invalid_argument("profile sample: bad values");
    by_tp[s.tp].push_back(&s);
  }
  std::map<int, linear_coeffs> out;
  constexpr int n = 6;
  for (auto& [tp, rows] : by_tp) {
    if (rows.size() < 2) throw std::invalid_argument("profile: tp " + std::to_string(tp) + " needs >= 2 samples");
    const int m = static_cast<int>(rows.size());
    // Rows are divided by the measured time, so the fit minimises relative error: a 2 ms reuse
    // step matters as much as a 60 ms refresh. Columns are scaled to unit norm for conditioning.
    std::vector<double> a(static_cast<std::size_t>(m * n)), y(static_cast<std::size_t>(m), 1.0);
    for (int i = 0; i < m; ++i) {
      const auto& s = *rows[static_cast<std::size_t>(i)];
      const auto f = profile_features(s);
      for (int j = 0; j < n; ++j) a[static_cast<std::size_t>(i * n + j)] = f[j] / s.seconds;
    }
    std::vector<double> scale(n, 0.0);
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) scale[static_cast<std::size_t>(j)] += a[static_cast<std::size_t>(i * n + j)] * a[static_cast<std::size_t>(i * n + j)];
      scale[static_cast<std::size_t>(j)] = scale[static_cast<std::size_t>(j)] > 0 ? std::sqrt(scale[static_cast<std::size_t>(j)]) : 1.0;
      for (int i = 0; i < m; ++i) a[static_cast<std::size_t>(i * n + j)] /= scale[static_cast<std::size_t>(j)];
    }
    auto x = nnls(a, y, m, n);
    for (int j = 0; j < n; ++j) x[static_cast<std::size_t>(j)] /= scale[static_cast<std::size_t>(j)];
    linear_coeffs c{x[0], x[1], x[2], x[3], x[4], x[5]};
    out[tp] = c;
    if (report) {
      fit_report fr;
      fr.tp = tp;
      fr.samples = rows.size();
      double mean = 0, ss_tot = 0, ss_res = 0;
      for (auto* s : rows) mean += s->seconds;
      mean /= m;
      for (auto* s : rows) {
        const auto f = profile_features(*s);
        const double pred = c.fixed_s * f[0] + c.per_request_s * f[1] + c.per_query_row_s * f[2] +
                            c.per_key_row_s * f[3] + c.per_qk_s * f[4] + c.per_refresh_step_s * f[5];
        ss_res += (pred - s->seconds) * (pred - s->seconds);
        ss_tot += (s->seconds - mean) * (s->seconds - mean);
        fr.max_rel_error = std::max(fr.max_rel_error, std::fabs(pred - s->seconds) / s->seconds);
      }
      fr.r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
      report->push_back(fr);
    }
  }
  return out;
}

// -- loading ----------------------------------------------------------------------------------

namespace {

double num(const YAML::Node& n, const char* key, double def, bool required = false) {
  if (!n[key]) {
    if (required) throw std::invalid_argument(std::string("step profile: missing '") + key + "'");
    return def;
  }
  return n[key].as<double>();
}

step_kind parse_kind(const std::string& s) {
  if (s == "refresh") return step_kind::refresh;
  if (s == "reuse") return step_kind::reuse;
  throw std::invalid_argument("step profile: kind must be refresh, reuse or mixed, got '" + s + "'");
}

}  // namespace

step_cost_model parse_step_cost_profile(const std::string& text) {
  YAML::Node root = YAML::Load(text);
  if (!root.IsMap()) throw std::invalid_argument("step profile: top level must be a map");
  const std::string kind = root["kind"] ? root["kind"].as<std::string>() : "measured";
  step_cost_model m;
  if (kind == "roofline") {
    const auto r = root["roofline"];
    if (!r) throw std::invalid_argument("step profile: roofline kind needs a 'roofline' map");
    roofline_params p;
    p.peak_flops = num(r, "peak_flops", 0, true);
    p.flops_efficiency = num(r, "flops_efficiency", 1);
    p.hbm_bytes_per_s = num(r, "hbm_bytes_per_s", 0, true);
    p.bandwidth_efficiency = num(r, "bandwidth_efficiency", 1);
    p.weight_bytes = num(r, "weight_bytes", 0, true);
    p.kv_bytes_per_token = num(r, "kv_bytes_per_token", 0, true);
    p.nonembed_params = num(r, "nonembed_params", 0, true);
    p.head_params = num(r, "head_params", 0, true);
    p.layers = num(r, "layers", 0, true);
    p.d_model = num(r, "d_model", 0, true);
    p.activation_bytes = num(r, "activation_bytes", 2);
    p.allreduce_latency_s = num(r, "allreduce_latency_s", 0);
    p.link_bytes_per_s = num(r, "link_bytes_per_s", 1e30);
    p.step_overhead_s = num(r, "step_overhead_s", 0);
    std::vector<int> tps = root["tp"] ? root["tp"].as<std::vector<int>>() : std::vector<int>{1};
    m = step_cost_model::make_roofline(p, tps);
  } else if (kind == "linear") {
    std::map<int, linear_coeffs> coeffs;
    for (const auto& kv : root["linear"]) {
      const auto c = kv.second;
      coeffs[kv.first.as<int>()] = {num(c, "fixed_s", 0), num(c, "per_request_s", 0),
                                    num(c, "per_query_row_s", 0), num(c, "per_key_row_s", 0),
                                    num(c, "per_qk_s", 0), num(c, "per_refresh_step_s", 0)};
    }
    if (coeffs.empty()) throw std::invalid_argument("step profile: linear kind needs 'linear'");
    m = step_cost_model::make_linear(coeffs);
  } else if (kind == "measured") {
    std::vector<profile_sample> samples;
    for (const auto& s : root["samples"]) {
      profile_sample ps;
      ps.tp = s["tp"] ? s["tp"].as<int>() : 1;
      const auto kind_name = s["kind"].as<std::string>();
      if (kind_name == "mixed") {
        // A mixed batch: `refreshing` of its requests refresh, the others reuse.
        if (!s["refreshing"]) throw std::invalid_argument("step profile: a mixed sample needs 'refreshing'");
        ps.refreshing = s["refreshing"].as<int>();
        ps.kind = step_kind::reuse;
      } else {
        ps.kind = parse_kind(kind_name);
      }
      ps.batch = s["batch"] ? s["batch"].as<int>() : 1;
      ps.query_rows = s["query_rows"].as<int>();
      ps.key_rows = s["key_rows"].as<int>();
      ps.seconds = s["seconds"].as<double>();
      if (ps.refreshing > ps.batch || (kind_name == "mixed" && ps.refreshing < 0))
        throw std::invalid_argument("step profile: a mixed sample's 'refreshing' must be in [0, batch]");
      samples.push_back(ps);
    }
    if (samples.empty()) throw std::invalid_argument("step profile: measured kind needs samples");
    m = step_cost_model::make_linear(fit_linear_step_cost(samples));
  } else {
    throw std::invalid_argument("step profile: unknown kind '" + kind + "'");
  }
  if (root["hardware"]) m.hardware = root["hardware"].as<std::string>();
  if (root["model"]) m.model = root["model"].as<std::string>();
  if (root["source"]) m.source = root["source"].as<std::string>();
  if (const auto mem = root["memory"]) {
    m.memory.device_bytes = num(mem, "device_bytes", 0);
    m.memory.weight_bytes = num(mem, "weight_bytes", m.memory.weight_bytes);
    m.memory.reserve_bytes = num(mem, "reserve_bytes", 0);
    m.memory.kv_bytes_per_token = num(mem, "kv_bytes_per_token", m.memory.kv_bytes_per_token);
  }
  if (const auto links = root["transfer"]) {
    if (!links.IsSequence()) throw std::invalid_argument("step profile: 'transfer' must be a list");
    for (const auto& l : links) {
      transfer_link t;
      t.tls = l["tls"] ? l["tls"].as<std::string>() : std::string();
      t.bytes_per_s = num(l, "bytes_per_s", 0);
      t.latency_s = num(l, "latency_s", 0);
      if (!(t.bytes_per_s > 0) || !(t.latency_s >= 0))
        throw std::invalid_argument("step profile: transfer '" + t.tls + "' needs bytes_per_s > 0 and latency_s >= 0");
      m.transfer.push_back(t);
    }
  }
  return m;
}

step_cost_model load_step_cost_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open step profile " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_step_cost_profile(ss.str());
}

}  // namespace dls::policy
