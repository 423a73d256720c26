#pragma once
// Discrete-event simulator: drives the policies in policies/ under a virtual clock with a
// step-cost profile, at cluster scale. Events: arrivals, step completions (timed by the
// step-cost model, refresh at each block start and reuse otherwise), commits (the block's step
// count drawn from the quality model at the current tau), migrations (timed by bytes over the
// link) and reconfigurations (drain, then regroup after a fixed cost). docs/simulator.md.
#include "common/step_log.hpp"
#include "policies/presets.hpp"
#include "sim/cluster.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dls::sim {

/// One request to replay: arrival time and canvas shape (see trace.hpp::to_canvas).
struct sim_request {
  double arrival_s = 0;
  int prompt_len = 0;
  int gen_len = 0;
  /// The decode ends after this many blocks (the block of the answer's EOS), as a live one
  /// does; the canvas, its step costs and the policies' view still hold all of gen_len, since
  /// nobody knows where the answer ends before it does. 0: all of gen_len.
  int answer_blocks = 0;
  /// on_miss: reject (a strict SLO): refused at arrival, with a reason, when the group it is
  /// placed on cannot finish it by its deadline (policy::refuse_if_late). Refused = a miss.
  bool reject_on_miss = false;
};

struct run_config {
  policy::policy_set policy;
  double slo_scale = 2.0;
  std::uint64_t seed = 1;
  /// Called now and then with the fraction of arrivals processed (progress bars).
  std::function<void(double)> progress;
  /// Called with every step a group starts (one step stream per group; not while co-running):
  /// `dilaserve sim --step-log`. Its `run` is left empty for the caller.
  std::function<void(const dls::step_record&)> on_step;
};

struct request_outcome {
  double arrival_s = 0;
  double deadline_s = 0;
  double finish_s = -1;       // -1 when dropped
  double accuracy = 0;        // token-weighted expected accuracy of the taus it ran at
  int tokens = 0;             // committed canvas tokens (= gen_len when finished)
  int steps = 0;              // denoising steps it took part in
  int migrations = 0;
  bool dropped = false;
  bool rejected = false;      // refused at arrival (on_miss: reject); finish_s stays -1
  // Where its latency went: queued_s before its first admission, then in_steps_s inside
  // steps, of which alone_s its own items would have taken alone on the same groups; the rest
  // of the latency it spent admitted but outside any step (left out of batches, or moving).
  double queued_s = 0;
  double in_steps_s = 0;
  double alone_s = 0;
};

/// Counters about the run itself; wall-clock figures never feed back into decisions.
struct run_stats {
  std::uint64_t events = 0;
  std::uint64_t group_steps = 0;
  double group_busy_s = 0;                // the groups' steps end to end (one step stream each; 0 co-running)
  std::uint64_t request_steps = 0;
  std::uint64_t refresh_chunks = 0;     // non-final layer ranges of split refreshes
  std::uint64_t migrations = 0;
  std::uint64_t reconfigurations = 0;     // nodes regrouped
  std::uint64_t rejected = 0;             // refused at arrival (on_miss: reject)
  std::string first_rejection;            // the reason given to the first one refused
  std::vector<policy::partition> boot_layout;  // the layout the run started in
  // batch_*: a group's step decision (with decide_step: admission, tau control when due and the
  // batch; on the simulator-only paths of layer-split refreshes and co-running: admission and
  // batch, tau control counted apart in control_*).
  std::uint64_t batch_decisions = 0, control_decisions = 0, migration_decisions = 0,
                reconfig_decisions = 0;
  double batch_policy_s = 0, control_policy_s = 0, migration_policy_s = 0, reconfig_policy_s = 0;
  double reconfig_max_s = 0;              // slowest single optimizer call
  double wall_s = 0;
  double virtual_end_s = 0;
};

struct run_result {
  std::vector<request_outcome> requests;  // in input order
  run_stats stats;
};

/// Runs one policy over the requests. Deterministic: same inputs and seed, same outcomes.
run_result simulate(const sim_cluster& cluster, const std::vector<sim_request>& requests,
                    const run_config& cfg);

/// A request's deadline: arrival + S x its isolated latency (alone on one device at the
/// reference tau, step-cost model, expected steps). The simulator and the bound both use it.
double request_deadline_s(const sim_cluster& cluster, const sim_request& r, double slo_scale);

/// Requests per second the cluster sustains in its initial layout at the reference tau, for
/// this length mix (saturated batches, no SLO): what load 1.0 means.
double cluster_capacity_rps(const sim_cluster& cluster, const std::vector<policy::length_class>& mix);

}  // namespace dls::sim
