#pragma once
// Upper bounds on SLO attainment that no policy can beat on a given workload, and a matching
// achievable schedule of the same relaxation (so the bound's slack is visible).
//
// Relaxation: the whole cluster is one preemptive machine of `devices` device-seconds per
// second (perfect parallelism across GPUs and TP degrees, no all-reduce, no per-step overhead,
// no weight reads, no batching limits), and each request needs only its minimum work: the
// fewest denoising steps any tau in the allowed range can give (min_block_steps), each costed
// at its compute-only device-seconds (min_step_device_seconds). Every real schedule is a
// schedule of this relaxation, so its on-time count is at most the relaxation's optimum.
//
// window_miss_bound: for disjoint windows [a_k, b_k], the requests released at or after a_k
// with deadlines at or before b_k must, if on time, fit devices x (b_k - a_k) of work; at most
// the cheapest ones that fit can be on time (the greedy is exact for counting). Every request
// outside the windows is assumed on time. The windows are chosen by dynamic programming to
// maximise the forced misses. Upper bound on attainment = (n - forced misses) / n.
//
// pooled_edf_on_time: an achievable schedule of the same relaxation (preemptive EDF on the
// pooled machine; on each arrival, while some deadline prefix overruns, the request with the
// most remaining work in it is given up, Moore-Hodgson style). Its on-time count is a lower
// bound on the relaxation's optimum, so optimum in [pooled_edf_on_time, n - forced misses].
#include "policies/quality.hpp"
#include "policies/step_cost.hpp"

#include <cstddef>
#include <vector>

namespace dls::policy {

/// A request as the bound sees it: when it can start, when it must finish, and the least
/// device-seconds of work it needs.
struct bound_job {
  double release_s = 0;
  double deadline_s = 0;
  double work_s = 0;
};

/// Least device-seconds one step of this shape can cost on any TP degree the model supports:
/// roofline, its compute-only FLOPs / (peak x efficiency) (the max with the memory term,
/// the all-reduces and the overhead only add; a TP-k step takes k devices for 1/k the time);
/// linear, min over k of k x (per-request + per-row terms), the fixed term left out.
double min_step_device_seconds(const step_cost_model& m, const step_item& it);

/// Fewest steps a block of `masks` masks can take when each step commits ceil(M / s) of the
/// M masks left, s is the step count planned for them, and s may be re-planned before every
/// step to any count >= max(1, floor(M / max_tokens_per_step)) (the simulator's commit rule
/// with the luckiest rounding and a tau change before every step).
int min_block_steps(int masks, double max_tokens_per_step);

/// Least device-seconds a request of canvas P + G needs: per block one refresh and
/// (min_block_steps - 1) reuses at the largest tokens per step in [tau_min, tau_max], over the
/// blocks it decodes: `decoded_blocks` when its answer ends early (the canvas stays whole), else
/// all G / block_len.
double min_request_device_seconds(const step_cost_model& m, const quality_model& q, int prompt_len,
                                  int gen_len, int block_len, double tau_min, double tau_max,
                                  int decoded_blocks = 0);

/// Forced misses over the best set of disjoint windows (see above). Windows start at a
/// release time and end at a deadline; `max_window_s` > 0 limits their length (cost
/// O(n^2 log n) without a limit). `devices` is the pooled capacity.
std::size_t window_miss_bound(std::vector<bound_job> jobs, double devices, double max_window_s = 0);

/// On-time count of the pooled-EDF schedule of the relaxation (an achievable lower bound on
/// the relaxation's optimum; see above).
std::size_t pooled_edf_on_time(std::vector<bound_job> jobs, double devices);

}  // namespace dls::policy
