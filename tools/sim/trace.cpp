#include "sim/trace.hpp"

#include "policies/forecast.hpp"

#include "sim/rng.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace dls::sim {

namespace {

// A whole field as an integer / a number; throws std::invalid_argument naming the problem.
long long whole_int(const std::string& s, const char* what) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size()) throw std::invalid_argument(std::string(what) + " '" + s + "' is not an integer");
  return v;
}

double whole_number(const std::string& s, const char* what) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || !std::isfinite(v))
    throw std::invalid_argument(std::string(what) + " '" + s + "' is not a number");
  return v;
}

// Seconds since the epoch of "YYYY-MM-DD HH:MM:SS[.frac]" (UTC), or a plain number.
double parse_time(const std::string& s) {
  if (s.size() >= 19 && s[4] == '-' && s[7] == '-') {
    const char* what = "TIMESTAMP";
    std::tm tm{};
    tm.tm_year = static_cast<int>(whole_int(s.substr(0, 4), what)) - 1900;
    tm.tm_mon = static_cast<int>(whole_int(s.substr(5, 2), what)) - 1;
    tm.tm_mday = static_cast<int>(whole_int(s.substr(8, 2), what));
    tm.tm_hour = static_cast<int>(whole_int(s.substr(11, 2), what));
    tm.tm_min = static_cast<int>(whole_int(s.substr(14, 2), what));
    tm.tm_sec = static_cast<int>(whole_int(s.substr(17, 2), what));
    double frac = 0;
    if (s.size() > 19) {
      if (s[19] != '.') throw std::invalid_argument("TIMESTAMP '" + s + "' is not YYYY-MM-DD HH:MM:SS[.frac]");
      frac = whole_number("0" + s.substr(19), "TIMESTAMP fraction");
    }
    return static_cast<double>(timegm(&tm)) + frac;
  }
  return whole_number(s, "TIMESTAMP");
}

int token_count(const std::string& s, const char* what) {
  const long long v = whole_int(s, what);
  if (v < 0 || v > 100000000) throw std::invalid_argument(std::string(what) + " " + s + " is out of range");
  return static_cast<int>(v);
}

}  // namespace

std::vector<trace_row> load_azure_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open trace " + path);
  std::vector<trace_row> rows;
  std::string line;
  bool header = true;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    if (header) {
      header = false;
      if (line.find("TIMESTAMP") != std::string::npos) continue;
    }
    std::stringstream ss(line);
    std::string a, b, c, d;
    const std::string where = "trace " + path + ":" + std::to_string(line_no) + ": ";
    if (!std::getline(ss, a, ',') || !std::getline(ss, b, ',') || !std::getline(ss, c, ','))
      throw std::runtime_error(where + "expected TIMESTAMP,ContextTokens,GeneratedTokens, got '" + line + "'");
    try {
      trace_row row{parse_time(a), token_count(b, "ContextTokens"), token_count(c, "GeneratedTokens")};
      if (std::getline(ss, d, ',') && !d.empty()) {
        row.decoded_tokens = token_count(d, "DecodedTokens");
        if (row.decoded_tokens < 1)
          throw std::invalid_argument("DecodedTokens " + d + " must be at least 1");
      }
      rows.push_back(row);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(where + e.what());
    }
  }
  if (rows.empty()) throw std::runtime_error("trace: no rows in " + path);
  std::stable_sort(rows.begin(), rows.end(), [](const trace_row& x, const trace_row& y) { return x.t < y.t; });
  const double t0 = rows.front().t;
  for (auto& r : rows) r.t -= t0;
  return rows;
}

std::vector<trace_row> synthetic_trace(const synthetic_spec& spec, std::size_t n, std::uint64_t seed) {
  if (spec.rate <= 0) throw std::invalid_argument("synthetic: rate must be > 0");
  rng gen(seed ^ 0x5eed5eedULL);
  std::vector<trace_row> rows;
  rows.reserve(n);
  // Gamma gaps with shape k = 1 / cv^2 and mean 1 / rate; k = 1 is Poisson.
  const double cv = spec.kind == "poisson" ? 1.0 : std::max(1e-3, spec.burstiness);
  if (spec.kind != "poisson" && spec.kind != "gamma")
    throw std::invalid_argument("synthetic: kind must be poisson or gamma");
  const double shape = 1.0 / (cv * cv);
  const double z99 = 2.3263478740408408;  // standard normal 99th percentile
  auto lognormal = [&](double p50, double p99) {
    const double mu = std::log(p50), sigma = std::log(p99 / p50) / z99;
    return std::exp(mu + sigma * gen.normal());
  };
  double t = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) t += gen.gamma(shape) / (shape * spec.rate);
    trace_row r;
    r.t = t;
    r.context_tokens = std::max(1, static_cast<int>(std::lround(lognormal(spec.context_p50, spec.context_p99))));
    r.generated_tokens = std::max(1, static_cast<int>(std::lround(lognormal(spec.generated_p50, spec.generated_p99))));
    rows.push_back(r);
  }
  return rows;
}

std::vector<trace_row> resize_trace(const std::vector<trace_row>& rows, std::size_t n) {
  std::vector<trace_row> out;
  if (rows.empty()) return out;
  out.reserve(n);
  // One copy spans the trace plus one mean gap, so the seam keeps the mean rate.
  const double span = rows.back().t - rows.front().t;
  const double period = span + (rows.size() > 1 ? span / static_cast<double>(rows.size() - 1) : 1.0);
  for (std::size_t i = 0; i < n; ++i) {
    trace_row r = rows[i % rows.size()];
    r.t += period * static_cast<double>(i / rows.size());
    out.push_back(r);
  }
  return out;
}

double trace_rate(const std::vector<trace_row>& rows) {
  if (rows.size() < 2) return 1.0;
  const double span = rows.back().t - rows.front().t;
  return span > 0 ? static_cast<double>(rows.size() - 1) / span : 1.0;
}

canvas_shape to_canvas(const trace_row& r, int block_len, int max_canvas) {
  int blocks = std::max(1, (r.generated_tokens + block_len - 1) / block_len);
  // Keep room for the prompt, up to half the canvas: a long answer is cut before a prompt is.
  const int prompt_room = std::min(std::max(1, r.context_tokens), max_canvas / 2);
  blocks = std::min(blocks, std::max(1, (max_canvas - prompt_room) / block_len));
  const int gen = blocks * block_len;
  const int prompt = std::max(1, std::min(r.context_tokens, max_canvas - gen));
  const int answer = r.decoded_tokens > 0 ? std::min(blocks, (r.decoded_tokens + block_len - 1) / block_len) : 0;
  return {prompt, gen, answer};
}

std::vector<policy::length_class> length_mix(const std::vector<canvas_shape>& shapes, int classes, int block_len) {
  std::vector<policy::request_shape> out;
  out.reserve(shapes.size());
  for (const auto& s : shapes) out.push_back({s.prompt_len, s.gen_len});
  return policy::length_mix(std::move(out), classes, block_len);
}

}  // namespace dls::sim
