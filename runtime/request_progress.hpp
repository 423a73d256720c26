#pragma once
// A request's policy state as its TP group last decided it: what `status` and `actors` show
// of a running request, and what its answer reports. The group batches these into its load
// reports (the supervisor hands each to its request actor at the head) and sends the last one
// with the answer, so the head gets no message per request for them.
#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>

namespace dls::runtime {

/// Its τ, its slack and deadline (ms after arrival) and the kind of its next step.
struct request_progress {
  double tau = 0;
  double slack_ms = 0;
  double deadline_ms = 0;
  std::string next_kind;  // refresh | reuse; empty: no group decided on it yet
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_progress& x) {
  return f(caf::meta::type_name("dls_request_progress"), x.tau, x.slack_ms, x.deadline_ms, x.next_kind);
}

/// One request's changed state in a group's load report, for its placement `epoch`.
struct progress_entry {
  uint64_t request_id = 0;
  uint32_t epoch = 0;
  request_progress progress;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, progress_entry& x) {
  return f(caf::meta::type_name("dls_progress_entry"), x.request_id, x.epoch, x.progress);
}

}  // namespace dls::runtime
