#include "sim/workload.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace dls::sim {

namespace {

constexpr double z99 = 2.3263478740408408;  // standard normal 99th percentile

void only_keys(const YAML::Node& n, const std::set<std::string>& allowed, const std::string& where) {
  if (!n.IsMap()) throw std::invalid_argument(where + ": expected a map");
  for (const auto& kv : n) {
    const auto k = kv.first.as<std::string>();
    if (!allowed.count(k)) throw std::invalid_argument(where + ": unknown key '" + k + "'");
  }
}

length_dist parse_dist(const YAML::Node& n, const std::string& where) {
  if (!n) throw std::invalid_argument(where + ": missing");
  only_keys(n, {"p50", "p99", "min", "max"}, where);
  length_dist d;
  if (!n["p50"] || !n["p99"]) throw std::invalid_argument(where + ": p50 and p99 are required");
  d.p50 = n["p50"].as<double>();
  d.p99 = n["p99"].as<double>();
  if (n["min"]) d.min = n["min"].as<int>();
  if (n["max"]) d.max = n["max"].as<int>();
  if (!(d.p50 >= 1) || !(d.p99 >= d.p50) || d.p99 > 1e7)
    throw std::invalid_argument(where + ": need 1 <= p50 <= p99 <= 1e7");
  if (d.min < 1 || d.max < d.min) throw std::invalid_argument(where + ": need 1 <= min <= max");
  return d;
}

arrival_spec parse_arrival(const YAML::Node& n, const std::string& where) {
  only_keys(n, {"kind", "cv"}, where);
  arrival_spec a;
  if (n["kind"]) a.kind = n["kind"].as<std::string>();
  if (a.kind != "trace" && a.kind != "poisson" && a.kind != "gamma")
    throw std::invalid_argument(where + ": kind must be trace, poisson or gamma, not '" + a.kind + "'");
  if (n["cv"]) a.cv = n["cv"].as<double>();
  if (a.kind == "gamma" && !(a.cv > 0 && a.cv <= 100)) throw std::invalid_argument(where + ": cv must be in (0, 100]");
  if (a.kind == "poisson") a.cv = 1;
  return a;
}

}  // namespace

std::string arrival_spec::label() const {
  if (kind != "gamma") return kind;
  std::ostringstream os;
  os << "gamma-cv" << cv;
  return os.str();
}

workload_spec parse_workload(const std::string& text, const std::string& base_dir) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(std::string("workload: bad YAML: ") + e.what());
  }
  only_keys(root, {"name", "source", "trace", "lengths", "arrivals", "requests", "on_miss"}, "workload");
  workload_spec w;
  try {
    if (!root["name"]) throw std::invalid_argument("workload: 'name' is required");
    w.name = root["name"].as<std::string>();
    const std::string where = "workload " + w.name;
    if (root["source"]) w.source = root["source"].as<std::string>();
    if (root["trace"]) {
      const auto p = root["trace"].as<std::string>();
      w.trace_path = p.empty() || p[0] == '/' || base_dir.empty() ? p : base_dir + "/" + p;
    }
    if (root["lengths"]) {
      if (!w.trace_path.empty()) throw std::invalid_argument(where + ": give 'trace' or 'lengths', not both");
      if (!root["lengths"].IsSequence() || root["lengths"].size() == 0)
        throw std::invalid_argument(where + ": 'lengths' must be a non-empty list of components");
      std::size_t i = 0;
      for (const auto& c : root["lengths"]) {
        const std::string cw = where + ": lengths[" + std::to_string(i++) + "]";
        only_keys(c, {"weight", "context", "generated"}, cw);
        length_component lc;
        if (c["weight"]) lc.weight = c["weight"].as<double>();
        if (!(lc.weight > 0)) throw std::invalid_argument(cw + ": weight must be > 0");
        lc.context = parse_dist(c["context"], cw + ".context");
        lc.generated = parse_dist(c["generated"], cw + ".generated");
        w.lengths.push_back(lc);
      }
    }
    if (w.trace_path.empty() && w.lengths.empty())
      throw std::invalid_argument(where + ": give 'trace' (a CSV) or 'lengths' (distributions)");
    if (root["arrivals"]) {
      if (!root["arrivals"].IsSequence() || root["arrivals"].size() == 0)
        throw std::invalid_argument(where + ": 'arrivals' must be a non-empty list");
      std::size_t i = 0;
      for (const auto& a : root["arrivals"])
        w.arrivals.push_back(parse_arrival(a, where + ": arrivals[" + std::to_string(i++) + "]"));
    } else {
      w.arrivals.push_back(arrival_spec{w.trace_path.empty() ? "poisson" : "trace", 1});
    }
    for (const auto& a : w.arrivals)
      if (a.kind == "trace" && w.trace_path.empty())
        throw std::invalid_argument(where + ": arrivals of kind 'trace' need a 'trace'");
    if (root["requests"]) {
      const long long n = root["requests"].as<long long>();
      if (n < 1 || n > 100000000) throw std::invalid_argument(where + ": requests must be in [1, 1e8]");
      w.requests = static_cast<std::size_t>(n);
    }
    if (w.trace_path.empty() && w.requests == 0) w.requests = 10000;
    if (root["on_miss"]) {
      const auto m = root["on_miss"].as<std::string>();
      if (m != "serve" && m != "reject") throw std::invalid_argument(where + ": on_miss must be serve or reject");
      w.reject_on_miss = m == "reject";
    }
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument("workload: bad value: " + std::string(e.what()));
  }
  return w;
}

workload_spec load_workload(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open workload " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return parse_workload(ss.str(), std::filesystem::path(path).parent_path().string());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(path + ": " + e.what());
  }
}

std::vector<workload_spec> load_suite(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw std::runtime_error("suite: " + dir + " is not a directory");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".yaml") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw std::runtime_error("suite: no *.yaml workload in " + dir);
  std::vector<workload_spec> out;
  std::set<std::string> names;
  for (const auto& f : files) {
    out.push_back(load_workload(f));
    if (!names.insert(out.back().name).second)
      throw std::invalid_argument("suite: workload name '" + out.back().name + "' appears twice");
  }
  return out;
}

int draw_length(const length_dist& d, rng& gen) {
  const double mu = std::log(d.p50), sigma = std::log(d.p99 / d.p50) / z99;
  const double x = std::exp(mu + sigma * gen.normal());
  return static_cast<int>(std::clamp<double>(std::lround(x), d.min, d.max));
}

trace_row draw_lengths(const std::vector<length_component>& mix, rng& gen) {
  double total = 0;
  for (const auto& c : mix) total += c.weight;
  double u = gen.uniform() * total;
  std::size_t k = 0;
  while (k + 1 < mix.size() && u >= mix[k].weight) u -= mix[k++].weight;
  trace_row r;
  r.context_tokens = draw_length(mix[k].context, gen);
  r.generated_tokens = draw_length(mix[k].generated, gen);
  return r;
}

double draw_gap(const arrival_spec& a, double rate, rng& gen) {
  // Gamma gaps with shape k = 1 / cv^2 and scale 1 / (k rate): mean 1 / rate, CV cv.
  const double cv = a.kind == "gamma" ? a.cv : 1.0;
  const double shape = 1.0 / (cv * cv);
  return gen.gamma(shape) / (shape * rate);
}

std::vector<trace_row> workload_rows(const workload_spec& w, const arrival_spec& a, std::uint64_t seed) {
  rng gen(seed * 0x9e3779b97f4a7c15ULL ^ 0x77c0ad5ULL);
  std::vector<trace_row> rows;
  if (!w.trace_path.empty()) {
    rows = load_azure_csv(w.trace_path);
    if (w.requests) rows = resize_trace(rows, w.requests);
    if (a.kind == "trace") return rows;
    // The trace's lengths in its order, under fresh arrivals at its mean rate.
    const double rate = trace_rate(rows);
    double t = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (i > 0) t += draw_gap(a, rate, gen);
      rows[i].t = t;
    }
    return rows;
  }
  rows.reserve(w.requests);
  double t = 0;
  for (std::size_t i = 0; i < w.requests; ++i) {
    if (i > 0) t += draw_gap(a, 1.0, gen);
    trace_row r = draw_lengths(w.lengths, gen);
    r.t = t;
    rows.push_back(r);
  }
  return rows;
}

}  // namespace dls::sim
