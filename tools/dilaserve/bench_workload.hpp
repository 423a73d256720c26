#pragma once
// The live bench's requests: the arrivals of a window of an LLM trace, each carrying a
// prompt of the model's eval set chosen by the quantile of the trace row's answer length.
#include "gpu/eval_set.hpp"
#include "sim/trace.hpp"

#include <cstddef>
#include <vector>

namespace dls::cli {

struct bench_request {
  double t = 0;             // seconds after the window's first arrival, trace time
  std::size_t problem = 0;  // index into the eval set
};

/// The rows with t < `duration_s` (trace seconds from its first row), mapped onto eval
/// problems: rows ranked by generated tokens (ties in trace order) and problems ranked by
/// answer length (gen_length, then the first valid answer's length; ties in file order); the
/// row at rank quantile q gets the problem at quantile q. Throws std::invalid_argument when
/// the window holds no row or the eval set is empty.
std::vector<bench_request> map_trace(const std::vector<sim::trace_row>& rows, double duration_s,
                                     const std::vector<gpu::eval_problem>& problems);

/// Arrivals per second of the mapped window ((n - 1) / span, as sim::trace_rate).
double window_rate(const std::vector<bench_request>& reqs);

}  // namespace dls::cli
