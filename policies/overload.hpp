#pragma once
// Load shedding at a TP group: which newly queued requests the group refuses because it cannot
// finish them by their deadline even with every lever pulled. decide_step calls it after the tau
// controller in the same decision, so the taus it reads are the ones the controller has just
// lowered, and the request itself is judged at its lowest allowed tau (tau_min, or its floor;
// a pinned tau stays). Only requests that were never examined before are refused: a request
// that passed once keeps its place, so what the cluster accepted is served and a refusal comes
// at the first decision after arrival (one step), never after a wait.
//
// The test is a load bound from the group's measured step costs (the profile plus the overhead
// the group measures around each step): the work the group owes before the request (every
// active request and the queued ones that arrived before it, late or not, at the taus the
// controller gave them; in least-slack order late requests would not count, and a backlog of
// them could grow without bound), in full batches of max_batch requests, plus the request's own
// at its lowest tau, against the time left to its deadline plus missed_grace SLO windows (the
// scheduler's line between a late request, served late, and a missed one). No queue length is
// fixed here: the backlog a group keeps follows from its step costs and its requests' deadlines.
#include "policies/group_step.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dls::policy {

/// The lowest tau request `r` may run at under `p`: its pinned tau, else the controller's
/// tau_min (tau_max without tau control) raised to its floor.
double lowest_tau(const request_view& r, const group_policy& p);

/// Refusals among `g.queued` whose ids are in `fresh`, in queue order. Each is judged against
/// the active requests and the queued ones before it that are not refused.
std::vector<refusal> shed_fresh(const group_snapshot& g, const std::vector<std::uint64_t>& fresh,
                                const group_policy& p, const step_cost_model& cost, const quality_model& q);

/// Seconds of group time the requests `g` holds still need (active and queued, each at its
/// tau), in full batches of max_batch: the backlog the group reports to the supervisor.
double backlog_s(const group_snapshot& g, const group_policy& p, const step_cost_model& cost, const quality_model& q);

/// At placement, before the head spends anything on the request: why a request with an SLO of
/// `slo_s` is refused when the group it would join already owes `backlog` seconds, more than
/// the SLO plus `grace` SLO windows, or "" (also without an SLO: the group then decides). The
/// head does not tokenize, so the request's own work is not counted: this refuses only what
/// the group would refuse too, and leaves the rest to it.
std::string refuse_at_placement(double backlog, double slo_s, double grace);

}  // namespace dls::policy
