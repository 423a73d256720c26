#pragma once
// Workloads of the simulator's suite (configs/sim/workloads/*.yaml): a trace replay or a
// synthetic workload drawn from documented distributions, each under one or more arrival
// processes. docs/simulator.md, "Workload suite".
#include "sim/rng.hpp"
#include "sim/trace.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dls::sim {

/// Log-normal token count given by its median and 99th percentile, clamped to [min, max].
struct length_dist {
  double p50 = 0;
  double p99 = 0;
  int min = 1;
  int max = 1 << 20;
};

/// One weighted component of a length mixture: context and generated tokens drawn
/// independently.
struct length_component {
  double weight = 1;
  length_dist context;
  length_dist generated;
};

/// How arrivals are drawn: `trace` keeps the trace's own times, `poisson` is exponential gaps,
/// `gamma` gaps with coefficient of variation `cv` (cv 1 is Poisson).
struct arrival_spec {
  std::string kind = "poisson";
  double cv = 1;
  std::string label() const;   // "trace", "poisson", "gamma-cv4", ...
};

struct workload_spec {
  std::string name;
  std::string source;          // free text: where the distributions come from
  std::string trace_path;      // non-empty: replay this CSV (lengths and, with `trace`, times)
  std::vector<length_component> lengths;   // synthetic lengths (trace_path empty)
  std::vector<arrival_spec> arrivals;
  std::size_t requests = 0;    // 0: the trace's own count, else this many
  bool reject_on_miss = false; // on_miss: reject (strict SLO) for every request of the workload
};

/// Parses a workload YAML; relative paths resolve against `base_dir`. Throws
/// std::invalid_argument naming the bad key.
workload_spec parse_workload(const std::string& text, const std::string& base_dir);
workload_spec load_workload(const std::string& path);
/// Every *.yaml in `dir`, sorted by file name. Throws if there is none.
std::vector<workload_spec> load_suite(const std::string& dir);

/// One draw of a length distribution / of a mixture's (context, generated) pair.
int draw_length(const length_dist& d, rng& gen);
trace_row draw_lengths(const std::vector<length_component>& mix, rng& gen);

/// Inter-arrival gaps with mean 1 / rate under `a` (not `trace`).
double draw_gap(const arrival_spec& a, double rate, rng& gen);

/// The rows of one (workload, arrival) variant: a replay keeps the trace's lengths (and times
/// for `trace`, else fresh gaps at the trace's mean rate); a synthetic one draws lengths and
/// gaps at 1 request/s. Deterministic in `seed`.
std::vector<trace_row> workload_rows(const workload_spec& w, const arrival_spec& a, std::uint64_t seed);

}  // namespace dls::sim
