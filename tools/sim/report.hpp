#pragma once
// Per-run summaries and their renderings: the console table, the JSON schema shared with the
// live bench, a CSV, and an SVG plot of SLO attainment against load for each policy.
#include "sim/simulator.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace dls::sim {

struct result_row {
  std::string policy;
  double load = 0;
  double slo_scale = 0;
  std::size_t requests = 0;
  double slo_attainment = 0;     // fraction of all requests finished by their deadline
  double mean_latency_s = 0;     // over finished requests
  double p50_latency_s = 0, p90_latency_s = 0, p99_latency_s = 0;
  double accuracy = 0;           // mean expected accuracy over finished requests, a fraction
  double tokens_per_step = 0;    // committed tokens / request steps, finished requests
  std::uint64_t migrations = 0;
  std::uint64_t reconfigurations = 0;
  std::size_t dropped = 0;
  std::size_t rejected = 0;      // refused at arrival (on_miss: reject); misses, not in `dropped`
  std::string workload;          // suite runs: "<workload>/<arrivals>"; empty for `dilaserve sim`
  std::string on_miss;           // suite runs: "serve" or "reject"
  /// Means over finished requests of request_outcome's latency parts; they sum to the mean latency.
  struct latency_parts {
    double queued_s = 0;        // before the first admission
    double left_out_s = 0;      // admitted, outside any step (batch formation left it out, or moving)
    double alone_s = 0;         // its own steps, as long as they would have been alone
    double shared_s = 0;        // what the other requests in its steps added
  } parts;
  run_stats stats;
};

/// Summarises one run. A dropped request counts as a miss and has no latency.
result_row summarize(const run_result& r, const std::string& policy, double load, double slo_scale);

/// {"results": [{"policy", "load", "slo_scale", "requests", "slo_attainment", "mean_latency_s",
///  "p50_latency_s", "p90_latency_s", "p99_latency_s", "accuracy", "tokens_per_step",
///  "migrations", "reconfigurations"}, ...]}; suite rows add "workload", "on_miss" and
/// "rejected".
nlohmann::json results_json(const std::vector<result_row>& rows);
std::string results_table(const std::vector<result_row>& rows);
/// Where the mean latency goes (ms): queued, left out, alone and shared, one line per row.
std::string latency_parts_table(const std::vector<result_row>& rows);
void write_results_csv(const std::string& path, const std::vector<result_row>& rows);
/// One request of one run, as `sim --out` and `bench --out` write it (requests.csv), so that
/// a live run and its simulation can be set side by side request by request.
struct request_row {
  std::string policy;
  double load = 0;
  double slo_scale = 0;
  std::size_t index = 0;   // its place in the run's arrivals
  double arrival_s = 0;    // after the run's first arrival
  double latency_s = -1;   // arrival to answer; -1: none (dropped, refused or failed)
  int steps = 0;           // denoising steps it took part in
  bool slo_met = false;
};
/// The rows of one run (`index` in arrival order).
std::vector<request_row> request_rows(const run_result& r, const std::string& policy, double load, double slo_scale);
void write_requests_csv(const std::string& path, const std::vector<request_row>& rows);

/// One line chart per SLO scale: x = load, y = attainment (%), a line per policy.
std::string attainment_svg(const std::vector<result_row>& rows, double slo_scale);
/// The same axes for latency: x = load, y = milliseconds; per policy the mean (solid) and the
/// p99 (dashed).
std::string latency_svg(const std::vector<result_row>& rows, double slo_scale);

/// Nearest-rank percentile `p` (0-100) of an ascending vector; 0 when empty. The report's
/// percentiles, shared with the live bench.
double nearest_rank(const std::vector<double>& sorted, double p);

}  // namespace dls::sim
