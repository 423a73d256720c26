// `sim-bound`: the upper bound on SLO attainment that any policy can reach on a simulated
// workload (tools/sim/bound.hpp, policies/bound.hpp), for the same requests, loads and SLO
// scales as `dilaserve sim`. Usage:
//   sim-bound --cluster FILE --trace CSV [--requests N] [--load l1,l2,...] [--slo-scale s1,...]
//             [--max-window SECONDS]
#include "sim/bound.hpp"
#include "sim/trace.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

std::vector<double> list(const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stod(item));
  return out;
}

int usage() {
  std::fprintf(stderr, "usage: sim-bound --cluster FILE --trace CSV [--requests N] [--load l1,...] "
                       "[--slo-scale s1,...] [--max-window SECONDS]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  namespace ds = dls::sim;
  std::string cluster_path, trace;
  std::size_t requests = 0;
  std::vector<double> loads{1.0}, scales{2.0};
  double max_window = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    if (a == "--cluster") cluster_path = v;
    else if (a == "--trace") trace = v;
    else if (a == "--requests") requests = std::stoul(v);
    else if (a == "--load") loads = list(v);
    else if (a == "--slo-scale") scales = list(v);
    else if (a == "--max-window") max_window = std::stod(v);
    else return usage();
  }
  if (cluster_path.empty() || trace.empty()) return usage();
  try {
    const auto cluster = ds::load_cluster(cluster_path);
    auto rows = ds::load_azure_csv(trace);
    if (requests) rows = ds::resize_trace(rows, requests);
    std::vector<ds::canvas_shape> shapes;
    for (const auto& r : rows) shapes.push_back(ds::to_canvas(r, cluster.block_len, cluster.max_canvas));
    // The same scaling as `dilaserve sim`: load 1.0 = the initial layout's capacity at tau_ref.
    const double capacity = ds::cluster_capacity_rps(cluster, ds::length_mix(shapes, 16));
    const double raw_rate = ds::trace_rate(rows);
    std::printf("cluster %s: %d devices, capacity %.2f req/s; %zu requests; tau range [%.2f, %.2f]\n",
                cluster.name.c_str(), cluster.devices(), capacity, rows.size(), cluster.threshold.tau_min,
                cluster.threshold.tau_max);
    std::printf("%6s %6s %10s %14s %14s %12s %8s\n", "load", "slo", "requests", "upper_bound_%",
                "relaxed_edf_%", "work_ms/req", "wall_s");
    for (double load : loads) {
      const double factor = raw_rate / (load * capacity);
      std::vector<ds::sim_request> reqs;
      for (std::size_t i = 0; i < rows.size(); ++i)
        reqs.push_back({rows[i].t * factor, shapes[i].prompt_len, shapes[i].gen_len});
      for (double s : scales) {
        const auto t0 = std::chrono::steady_clock::now();
        const auto b = ds::slo_attainment_bound(cluster, reqs, s, max_window);
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("%6.2f %6.2f %10zu %14.2f %14.2f %12.3f %8.2f\n", load, s, b.requests, 100 * b.upper,
                    100 * b.relaxed, 1e3 * b.mean_work_s, wall);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sim-bound: %s\n", e.what());
    return 1;
  }
  return 0;
}
