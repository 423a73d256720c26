#include "policies/quality.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace dls::policy {

quality_model::quality_model(std::vector<quality_point> points) {
  if (points.empty()) throw std::invalid_argument("quality curve: no points");
  struct sums {
    double accuracy = 0, tokens_per_step = 0;
    int n = 0;
    std::vector<double> block_steps;  // counts add up over duplicates of one tau
    int block_length = 0;
  };
  std::map<double, sums> by_tau;
  for (const auto& p : points) {
    if (p.tokens_per_step < 1.0 || p.accuracy < 0.0 || p.accuracy > 1.0)
      throw std::invalid_argument("quality curve: need accuracy in [0,1] and tokens_per_step >= 1");
    for (double k : p.block_steps)
      if (!(k >= 0.0) || std::isinf(k)) throw std::invalid_argument("quality curve: block_steps must be counts >= 0");
    auto& e = by_tau[p.tau];
    e.accuracy += p.accuracy;
    e.tokens_per_step += p.tokens_per_step;
    ++e.n;
    if (!p.block_steps.empty()) {
      if (e.block_length != 0 && e.block_length != p.block_length)
        throw std::invalid_argument("quality curve: block_steps of one tau measured at two block lengths");
      e.block_length = p.block_length;
      e.block_steps.resize(std::max(e.block_steps.size(), p.block_steps.size()), 0.0);
      for (std::size_t k = 0; k < p.block_steps.size(); ++k) e.block_steps[k] += p.block_steps[k];
    }
  }
  for (const auto& [tau, e] : by_tau) {
    quality_point q(tau, e.accuracy / e.n, e.tokens_per_step / e.n);
    double blocks = 0;
    for (double k : e.block_steps) blocks += k;
    if (blocks > 0) {
      q.block_steps = e.block_steps;
      q.block_length = e.block_length;
    }
    pts_.push_back(q);
  }
  set_refresh_interval(0);
}

quality_model::bracket quality_model::around(double tau) const {
  if (tau <= pts_.front().tau) return {&pts_.front(), &pts_.front(), 0.0};
  if (tau >= pts_.back().tau) return {&pts_.back(), &pts_.back(), 0.0};
  auto hi = std::upper_bound(pts_.begin(), pts_.end(), tau,
                             [](double t, const quality_point& p) { return t < p.tau; });
  const quality_point& a = *(hi - 1);
  const quality_point& b = *hi;
  return {&a, &b, (tau - a.tau) / (b.tau - a.tau)};
}

double quality_model::interp(double tau, double quality_point::*field) const {
  const auto [a, b, w] = around(tau);
  return a->*field + w * (b->*field - a->*field);
}

double quality_model::accuracy(double tau) const { return interp(tau, &quality_point::accuracy); }

double quality_model::tokens_per_step(double tau) const {
  return interp(tau, &quality_point::tokens_per_step);
}

double quality_model::steps_for(int masks, double tau) const {
  if (masks <= 0) return 0.0;
  return std::max(1.0, masks / tokens_per_step(tau));
}

namespace {

bool measured_at(const quality_point& p, int block_len) {
  return !p.block_steps.empty() && p.block_length == block_len;
}

}  // namespace

void quality_model::set_refresh_interval(int every) {
  refresh_interval_ = every;
  // E[s] and E[ceil(s / every)] over each point's measured blocks (every <= 0: one refresh a block).
  moments_.assign(pts_.size(), {});
  for (std::size_t i = 0; i < pts_.size(); ++i) {
    const auto& steps = pts_[i].block_steps;
    double n = 0;
    auto& m = moments_[i];
    for (std::size_t k = 0; k < steps.size(); ++k) {
      const int s = static_cast<int>(k) + 1;
      n += steps[k];
      m.steps += steps[k] * s;
      m.refreshes += steps[k] * (every > 0 ? (s + every - 1) / every : 1);
    }
    if (n > 0) {
      m.steps /= n;
      m.refreshes /= n;
    }
  }
}

std::vector<double> quality_model::measured_block_steps(int block_len, double tau) const {
  const auto [a, b, w] = around(tau);
  if (!measured_at(*a, block_len) || !measured_at(*b, block_len)) return {};
  double na = 0, nb = 0;
  for (double k : a->block_steps) na += k;
  for (double k : b->block_steps) nb += k;
  std::vector<double> d(std::max(a->block_steps.size(), b->block_steps.size()), 0.0);
  for (std::size_t k = 0; k < a->block_steps.size(); ++k) d[k] += (1.0 - w) * a->block_steps[k] / na;
  for (std::size_t k = 0; k < b->block_steps.size(); ++k) d[k] += w * b->block_steps[k] / nb;
  return d;
}

double quality_model::refresh_share(int block_len, double tau) const {
  const double mean = std::max(1.0, steps_for(block_len, tau));
  if (refresh_interval_ <= 0) return 1.0 / mean;
  // Both expectations are linear in the distribution: the mixture's are the points' mixed. On
  // every decision's path, so computed without building the distribution.
  const auto [a, b, w] = around(tau);
  if (measured_at(*a, block_len) && measured_at(*b, block_len)) {
    const auto& ma = moments_[static_cast<std::size_t>(a - pts_.data())];
    const auto& mb = moments_[static_cast<std::size_t>(b - pts_.data())];
    return ((1.0 - w) * ma.refreshes + w * mb.refreshes) / ((1.0 - w) * ma.steps + w * mb.steps);
  }
  // Not measured: the two integers around the mean, weighted to it.
  const double fl = std::floor(mean), up = mean - fl;
  auto ceil_div = [&](double s) { return std::ceil(s / refresh_interval_); };
  return ((1.0 - up) * ceil_div(fl) + up * ceil_div(fl + 1.0)) / mean;
}

double quality_model::steps_per_refresh(int block_len, double tau) const {
  if (refresh_interval_ <= 0) return steps_for(block_len, tau);
  return 1.0 / refresh_share(block_len, tau);
}

double quality_model::refreshes_left_in_block(int done, double left) const {
  if (refresh_interval_ <= 0 || left <= 0) return 0.0;
  const double last = static_cast<double>(done) + left - 1.0;  // index of the block's last step
  const double r = refresh_interval_;
  return std::max(0.0, std::floor(last / r) - std::floor((done - 1) / r));
}

namespace {

quality_point point_from(const YAML::Node& n) {
  quality_point p;
  if (n["tau"]) {
    p.tau = n["tau"].as<double>();
  } else if (n["threshold"]) {
    // dilaserve eval: null threshold = one token per step, which tau = 1 also means.
    p.tau = n["threshold"].IsNull() ? 1.0 : n["threshold"].as<double>();
  } else {
    throw std::invalid_argument("quality curve: a point needs 'tau' or 'threshold'");
  }
  p.accuracy = n["accuracy"].as<double>();
  if (p.accuracy > 1.0) p.accuracy /= 100.0;
  p.tokens_per_step = n["tokens_per_step"].as<double>();
  if (n["block_steps"]) {
    p.block_steps = n["block_steps"].as<std::vector<double>>();
    if (!n["block_length"]) throw std::invalid_argument("quality curve: block_steps needs the block_length it was measured at");
    p.block_length = n["block_length"].as<int>();
    if (p.block_length <= 0) throw std::invalid_argument("quality curve: block_length must be positive");
  }
  return p;
}

}  // namespace

quality_model parse_quality_curve(const std::string& text) {
  YAML::Node root = YAML::Load(text);
  YAML::Node list = root.IsMap() ? root["points"] : root;
  if (!list || !list.IsSequence()) throw std::invalid_argument("quality curve: no point list");
  std::vector<quality_point> pts;
  for (const auto& n : list) pts.push_back(point_from(n));
  quality_model q(pts);
  if (root.IsMap() && root["source"]) q.source = root["source"].as<std::string>();
  return q;
}

quality_model load_quality_curve(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open quality curve " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto q = parse_quality_curve(ss.str());
  if (q.source.empty()) q.source = path;
  return q;
}

}  // namespace dls::policy
