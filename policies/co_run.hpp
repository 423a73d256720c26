#pragma once
// Co-running: a TP group that runs refresh steps and reuse steps side by side, on two step
// streams, instead of one step at a time. A refresh is compute-bound and a reuse step is
// bound by its weight reads, so the two can share a device; what each then costs depends on
// how the hardware shares it. Three models (docs/policies.md, "Co-running"):
//  - fluid: both share every SM (CTA-level co-scheduling). The reuse step takes the HBM
//    bandwidth the refresh does not read and exactly the compute its FLOPs need; the refresh
//    keeps the rest of the compute. The upper bound of any co-running under the roofline.
//  - partition: whole SMs are split (CUDA green contexts). The reuse step takes the smallest
//    multiple of 1/16 of the SMs, at most `max_reuse_share`, that keeps it within 5 % of its
//    full-device time; s of the SMs pull at most min(1, s / sm_saturation) of the bandwidth,
//    less what the refresh reads; the refresh runs on the other SMs.
//  - tax: the reuse step runs at its full-device speed and slows the refresh by the fraction
//    `tax` while it runs: the form a measured co-run slowdown takes.
// Used by the simulator only: the live engine has one step stream per group.
#include "policies/step_cost.hpp"

#include <string>

namespace dls::policy {

enum class co_run_model { off, fluid, partition, tax };

struct co_run_config {
  co_run_model model = co_run_model::off;
  double sm_saturation = 0.35;   // partition: fraction of SMs that saturates HBM
  double max_reuse_share = 0.5;  // partition: most SMs a reuse step takes
  double tax = 0.2;              // tax: refresh slowdown while a reuse step runs beside it
};

/// "off", "fluid", "partition" or "tax"; std::invalid_argument naming the value otherwise.
co_run_model parse_co_run_model(const std::string& name);
const char* co_run_model_name(co_run_model m);

struct co_run_cost {
  double reuse_s = 0;        // the reuse step's duration beside the refresh
  double refresh_rate = 1;   // the refresh's progress per second, as a fraction of full speed
  double reuse_share = 0;    // compute (fluid) or SMs (partition) the reuse step holds
};

/// A reuse step of batch `reuse` that starts while a refresh step of batch `refresh` runs on
/// the same TP-k group. fluid and partition need a roofline profile (std::invalid_argument
/// otherwise); tax works with any. With model off: the reuse step's full-device time and a
/// stalled refresh (rate 0), i.e. the two would not overlap.
co_run_cost co_run(const step_cost_model& cost, int tp, const batch_totals& reuse, const batch_totals& refresh,
                   const co_run_config& cfg);

/// The rate of a refresh step that starts while a reuse step placed by co_run() (`beside`)
/// runs: the reuse step keeps its share, the refresh gets the rest.
double co_run_refresh_rate(const step_cost_model& cost, int tp, const batch_totals& refresh,
                           const co_run_cost& beside, const co_run_config& cfg);

}  // namespace dls::policy
