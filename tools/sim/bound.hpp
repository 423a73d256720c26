#pragma once
// The SLO-attainment bound of a simulated workload (policies/bound.hpp): the same requests
// and deadlines the simulator replays, each at its least work over the allowed tau range, on
// the cluster's devices pooled into one preemptive machine. `dilaserve sim-bound` prints it per load.
#include "sim/simulator.hpp"

#include <cstddef>
#include <vector>

namespace dls::sim {

struct attainment_bound {
  std::size_t requests = 0;
  std::size_t forced_misses = 0;    // window_miss_bound
  std::size_t relaxed_on_time = 0;  // pooled_edf_on_time (achievable in the relaxation)
  double upper = 1;                 // (requests - forced_misses) / requests
  double relaxed = 1;               // relaxed_on_time / requests
  double mean_work_s = 0;           // least device-seconds per request
};

/// `max_window_s` > 0 limits the windows' length (faster for big traces, still a bound).
attainment_bound slo_attainment_bound(const sim_cluster& cluster, const std::vector<sim_request>& requests,
                                      double slo_scale, double max_window_s = 0);

}  // namespace dls::sim
