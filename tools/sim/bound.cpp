#include "sim/bound.hpp"

#include "policies/bound.hpp"

#include <algorithm>

namespace dls::sim {

attainment_bound slo_attainment_bound(const sim_cluster& c, const std::vector<sim_request>& requests,
                                      double slo_scale, double max_window_s) {
  attainment_bound out;
  out.requests = requests.size();
  if (requests.empty()) return out;
  std::vector<policy::bound_job> jobs;
  jobs.reserve(requests.size());
  double work = 0;
  // In the simulator a request reaches a group no sooner than its own share of the head's CPU
  // and the control plane's fixed latency after it arrives, so no schedule can start its work
  // earlier. Clamped to the deadline: a window of length zero holds no work, so such a request
  // is a forced miss.
  const double way_in_s = c.control_plane.cpu_s + c.control_plane.request_s;
  for (const auto& r : requests) {
    policy::bound_job j;
    j.deadline_s = request_deadline_s(c, r, slo_scale);
    j.release_s = std::min(r.arrival_s + way_in_s, j.deadline_s);
    // A request whose answer ends early decodes only its answer's blocks, as the simulator runs it.
    j.work_s = policy::min_request_device_seconds(c.cost, c.quality, r.prompt_len, r.gen_len, c.block_len,
                                                  c.threshold.tau_min, c.threshold.tau_max, r.answer_blocks);
    work += j.work_s;
    jobs.push_back(j);
  }
  const double devices = c.devices();
  out.mean_work_s = work / static_cast<double>(jobs.size());
  out.forced_misses = policy::window_miss_bound(jobs, devices, max_window_s);
  out.relaxed_on_time = policy::pooled_edf_on_time(jobs, devices);
  const double n = static_cast<double>(out.requests);
  out.upper = (n - static_cast<double>(out.forced_misses)) / n;
  out.relaxed = static_cast<double>(out.relaxed_on_time) / n;
  return out;
}

}  // namespace dls::sim
