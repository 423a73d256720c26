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
  };
  std::map<double, sums> by_tau;
  for (const auto& p : points) {
    if (p.tokens_per_step < 1.0 || p.accuracy < 0.0 || p.accuracy > 1.0)
      throw std::invalid_argument("quality curve: need accuracy in [0,1] and tokens_per_step >= 1");
    auto& e = by_tau[p.tau];
    e.accuracy += p.accuracy;
    e.tokens_per_step += p.tokens_per_step;
    ++e.n;
  }
  for (const auto& [tau, e] : by_tau) pts_.push_back({tau, e.accuracy / e.n, e.tokens_per_step / e.n});
}

double quality_model::interp(double tau, double quality_point::*field) const {
  if (tau <= pts_.front().tau) return pts_.front().*field;
  if (tau >= pts_.back().tau) return pts_.back().*field;
  auto hi = std::upper_bound(pts_.begin(), pts_.end(), tau,
                             [](double t, const quality_point& p) { return t < p.tau; });
  const quality_point& a = *(hi - 1);
  const quality_point& b = *hi;
  const double w = (tau - a.tau) / (b.tau - a.tau);
  return a.*field + w * (b.*field - a.*field);
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
