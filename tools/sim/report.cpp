#include "sim/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace dls::sim {

double nearest_rank(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  const double rank = std::ceil(p / 100.0 * static_cast<double>(sorted.size()));
  const std::size_t i = static_cast<std::size_t>(std::clamp(rank, 1.0, static_cast<double>(sorted.size()))) - 1;
  return sorted[i];
}

result_row summarize(const run_result& r, const std::string& policy, double load, double slo_scale) {
  result_row row;
  row.policy = policy;
  row.load = load;
  row.slo_scale = slo_scale;
  row.requests = r.requests.size();
  row.migrations = r.stats.migrations;
  row.reconfigurations = r.stats.reconfigurations;
  row.stats = r.stats;
  std::vector<double> lat;
  lat.reserve(r.requests.size());
  double acc = 0, tokens = 0, steps = 0;
  std::size_t met = 0;
  for (const auto& o : r.requests) {
    if (o.rejected) {
      ++row.rejected;
      continue;
    }
    if (o.dropped || o.finish_s < 0) {
      ++row.dropped;
      continue;
    }
    lat.push_back(o.finish_s - o.arrival_s);
    row.parts.queued_s += o.queued_s;
    row.parts.left_out_s += (o.finish_s - o.arrival_s) - o.queued_s - o.in_steps_s;
    row.parts.alone_s += o.alone_s;
    row.parts.shared_s += o.in_steps_s - o.alone_s;
    if (o.finish_s <= o.deadline_s + 1e-12) ++met;
    acc += o.accuracy;
    tokens += o.tokens;
    steps += o.steps;
  }
  std::sort(lat.begin(), lat.end());
  const double n = static_cast<double>(lat.size());
  row.slo_attainment = row.requests ? static_cast<double>(met) / static_cast<double>(row.requests) : 0.0;
  double sum = 0;
  for (double x : lat) sum += x;
  row.mean_latency_s = n > 0 ? sum / n : 0.0;
  row.p50_latency_s = nearest_rank(lat, 50);
  row.p90_latency_s = nearest_rank(lat, 90);
  row.p99_latency_s = nearest_rank(lat, 99);
  row.accuracy = n > 0 ? acc / n : 0.0;
  if (n > 0) {
    row.parts.queued_s /= n;
    row.parts.left_out_s /= n;
    row.parts.alone_s /= n;
    row.parts.shared_s /= n;
  }
  row.tokens_per_step = steps > 0 ? tokens / steps : 0.0;
  return row;
}

nlohmann::json results_json(const std::vector<result_row>& rows) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& r : rows) {
    arr.push_back({{"policy", r.policy},
                   {"load", r.load},
                   {"slo_scale", r.slo_scale},
                   {"requests", r.requests},
                   {"slo_attainment", r.slo_attainment},
                   {"mean_latency_s", r.mean_latency_s},
                   {"p50_latency_s", r.p50_latency_s},
                   {"p90_latency_s", r.p90_latency_s},
                   {"p99_latency_s", r.p99_latency_s},
                   {"accuracy", r.accuracy},
                   {"tokens_per_step", r.tokens_per_step},
                   {"migrations", r.migrations},
                   {"reconfigurations", r.reconfigurations}});
    if (!r.workload.empty()) {
      arr.back()["workload"] = r.workload;
      arr.back()["on_miss"] = r.on_miss;
      arr.back()["rejected"] = r.rejected;
    }
  }
  return {{"results", arr}};
}

std::string results_table(const std::vector<result_row>& rows) {
  std::ostringstream os;
  char buf[512];
  bool suite = false;
  std::size_t wl = 8;
  for (const auto& r : rows)
    if (!r.workload.empty()) {
      suite = true;
      wl = std::max(wl, r.workload.size());
    }
  if (suite) {
    std::snprintf(buf, sizeof buf, "%-*s %-6s ", static_cast<int>(wl), "workload", "miss");
    os << buf;
  }
  std::snprintf(buf, sizeof buf, "%-14s %5s %4s %8s %7s %8s %8s %8s %8s %6s %5s %6s %6s %6s\n",
                "policy", "load", "S", "requests", "SLO%", "mean_s", "p50_s", "p90_s", "p99_s",
                "acc%", "tok/s", "migr", "reconf", "drop");
  os << (suite ? std::string(buf).substr(0, std::string(buf).size() - 1) + "   rej\n" : std::string(buf));
  for (const auto& r : rows) {
    if (suite) {
      std::snprintf(buf, sizeof buf, "%-*s %-6s ", static_cast<int>(wl), r.workload.c_str(), r.on_miss.c_str());
      os << buf;
    }
    std::snprintf(buf, sizeof buf,
                  "%-14s %5.2f %4.1f %8zu %7.2f %8.3f %8.3f %8.3f %8.3f %6.2f %5.2f %6llu %6llu %6zu\n",
                  r.policy.c_str(), r.load, r.slo_scale, r.requests, 100.0 * r.slo_attainment,
                  r.mean_latency_s, r.p50_latency_s, r.p90_latency_s, r.p99_latency_s,
                  100.0 * r.accuracy, r.tokens_per_step,
                  static_cast<unsigned long long>(r.migrations),
                  static_cast<unsigned long long>(r.reconfigurations), r.dropped);
    if (suite) {
      std::string line(buf);
      line.pop_back();
      std::snprintf(buf, sizeof buf, " %5zu\n", r.rejected);
      line += buf;
      os << line;
    } else {
      os << buf;
    }
  }
  return os.str();
}

std::string latency_parts_table(const std::vector<result_row>& rows) {
  std::ostringstream os;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-24s %-14s %5s %9s %9s %9s %9s %9s\n", "workload", "policy", "load", "mean",
                "queued", "left_out", "alone", "shared");
  os << buf;
  for (const auto& r : rows) {
    const auto& p = r.parts;
    std::snprintf(buf, sizeof buf, "%-24s %-14s %5.2f %9.1f %9.1f %9.1f %9.1f %9.1f\n", r.workload.c_str(),
                  r.policy.c_str(), r.load, 1e3 * r.mean_latency_s, 1e3 * p.queued_s, 1e3 * p.left_out_s,
                  1e3 * p.alone_s, 1e3 * p.shared_s);
    os << buf;
  }
  return os.str();
}

std::vector<request_row> request_rows(const run_result& r, const std::string& policy, double load, double slo_scale) {
  std::vector<request_row> out;
  out.reserve(r.requests.size());
  const double t0 = r.requests.empty() ? 0.0 : r.requests.front().arrival_s;
  for (std::size_t i = 0; i < r.requests.size(); ++i) {
    const auto& q = r.requests[i];
    const bool done = q.finish_s >= 0 && !q.dropped && !q.rejected;
    out.push_back({policy, load, slo_scale, i, q.arrival_s - t0, done ? q.finish_s - q.arrival_s : -1.0, q.steps,
                   done && q.finish_s <= q.deadline_s});
  }
  return out;
}

void write_requests_csv(const std::string& path, const std::vector<request_row>& rows) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << "policy,load,slo_scale,index,arrival_s,latency_s,steps,slo_met\n";
  out.precision(10);
  for (const auto& r : rows)
    out << r.policy << ',' << r.load << ',' << r.slo_scale << ',' << r.index << ',' << r.arrival_s << ','
        << r.latency_s << ',' << r.steps << ',' << (r.slo_met ? 1 : 0) << '\n';
}

void write_results_csv(const std::string& path, const std::vector<result_row>& rows) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << "policy,load,slo_scale,requests,slo_attainment,mean_latency_s,p50_latency_s,p90_latency_s,"
         "p99_latency_s,accuracy,tokens_per_step,migrations,reconfigurations,dropped,events,"
         "wall_s,virtual_s,group_steps,group_busy_s\n";
  out.precision(10);
  for (const auto& r : rows)
    out << r.policy << ',' << r.load << ',' << r.slo_scale << ',' << r.requests << ','
        << r.slo_attainment << ',' << r.mean_latency_s << ',' << r.p50_latency_s << ','
        << r.p90_latency_s << ',' << r.p99_latency_s << ',' << r.accuracy << ','
        << r.tokens_per_step << ',' << r.migrations << ',' << r.reconfigurations << ','
        << r.dropped << ',' << r.stats.events << ',' << r.stats.wall_s << ','
        << r.stats.virtual_end_s << ',' << r.stats.group_steps << ',' << r.stats.group_busy_s << '\n';
}

}  // namespace dls::sim
