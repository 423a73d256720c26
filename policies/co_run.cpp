#include "policies/co_run.hpp"

#include <algorithm>
#include <stdexcept>

namespace dls::policy {

co_run_model parse_co_run_model(const std::string& name) {
  if (name == "off") return co_run_model::off;
  if (name == "fluid") return co_run_model::fluid;
  if (name == "partition") return co_run_model::partition;
  if (name == "tax") return co_run_model::tax;
  throw std::invalid_argument("co_run: unknown model '" + name + "' (off, fluid, partition, tax)");
}

const char* co_run_model_name(co_run_model m) {
  switch (m) {
    case co_run_model::off: return "off";
    case co_run_model::fluid: return "fluid";
    case co_run_model::partition: return "partition";
    case co_run_model::tax: return "tax";
  }
  return "off";
}

namespace {

// Step time when the step holds `compute` of the group's compute and `bandwidth` of its HBM.
double shared_step_s(const step_parts& w, double compute, double bandwidth) {
  return std::max(w.compute_s / compute, w.memory_s / bandwidth) + w.fixed_s;
}

// The least bandwidth left to a reuse step: a refresh may read so much that nothing is left
// in the model, but a step always gets some (the memory system serves both).
constexpr double min_bandwidth = 0.05;

}  // namespace

co_run_cost co_run(const step_cost_model& cost, int tp, const batch_totals& reuse, const batch_totals& refresh,
                   const co_run_config& cfg) {
  co_run_cost out;
  out.reuse_s = cost.step_seconds(tp, reuse);
  switch (cfg.model) {
    case co_run_model::off:
      out.refresh_rate = 0.0;
      return out;
    case co_run_model::tax:
      out.refresh_rate = 1.0 - cfg.tax;
      out.reuse_share = cfg.tax;
      return out;
    case co_run_model::fluid:
    case co_run_model::partition:
      break;
  }
  if (cost.kind() != step_cost_model::form::roofline)
    throw std::invalid_argument(std::string("co_run: model '") + co_run_model_name(cfg.model) +
                                "' needs a roofline profile");
  const auto u = cost.roofline_parts(tp, reuse);
  const auto r = cost.roofline_parts(tp, refresh);
  const double r_full = std::max(r.compute_s, r.memory_s) + r.fixed_s;
  if (cfg.model == co_run_model::fluid) {
    // The refresh keeps reading at its own pace; the reuse step gets the rest of the HBM and
    // holds the compute its FLOPs take over its duration, which the refresh loses.
    const double refresh_bw = r.memory_s / r_full;
    out.reuse_s = shared_step_s(u, 1.0, std::max(min_bandwidth, 1.0 - refresh_bw));
    out.reuse_share = std::min(1.0, u.compute_s / out.reuse_s);
    out.refresh_rate = 1.0 - out.reuse_share;
    return out;
  }
  const double full = out.reuse_s;
  constexpr double grain = 1.0 / 16;  // SM partitions in sixteenths of the device
  const double max_share = std::max(grain, std::min(1.0 - grain, cfg.max_reuse_share));
  for (double s = grain; s <= max_share + 1e-9; s += grain) {
    const double r_s = shared_step_s(r, 1.0 - s, 1.0);
    const double refresh_bw = r.memory_s / r_s;
    const double bw = std::max(min_bandwidth, std::min(s / cfg.sm_saturation, 1.0 - refresh_bw));
    out.reuse_s = shared_step_s(u, s, std::min(1.0, bw));
    out.reuse_share = s;
    out.refresh_rate = r_full / r_s;
    if (out.reuse_s <= 1.05 * full) break;
  }
  return out;
}

double co_run_refresh_rate(const step_cost_model& cost, int tp, const batch_totals& refresh,
                           const co_run_cost& beside, const co_run_config& cfg) {
  switch (cfg.model) {
    case co_run_model::off: return 0.0;
    case co_run_model::tax: return 1.0 - cfg.tax;
    case co_run_model::fluid: return 1.0 - beside.reuse_share;
    case co_run_model::partition: break;
  }
  const auto r = cost.roofline_parts(tp, refresh);
  return (std::max(r.compute_s, r.memory_s) + r.fixed_s) / shared_step_s(r, 1.0 - beside.reuse_share, 1.0);
}

}  // namespace dls::policy
