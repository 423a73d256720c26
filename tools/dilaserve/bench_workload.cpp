#include "dilaserve/bench_workload.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace dls::cli {

std::vector<bench_request> map_trace(const std::vector<sim::trace_row>& rows, double duration_s,
                                     const std::vector<gpu::eval_problem>& problems) {
  if (problems.empty()) throw std::invalid_argument("the eval set is empty");
  std::vector<sim::trace_row> window;
  for (const auto& r : rows)
    if (r.t < duration_s) window.push_back(r);
  if (window.empty())
    throw std::invalid_argument("the first " + std::to_string(duration_s) + " s of the trace hold no request");
  std::vector<std::size_t> by_answer(problems.size());
  std::iota(by_answer.begin(), by_answer.end(), std::size_t{0});
  auto answer_len = [&](std::size_t i) { return problems[i].valid.empty() ? 0 : problems[i].valid[0].size(); };
  std::stable_sort(by_answer.begin(), by_answer.end(), [&](std::size_t a, std::size_t b) {
    if (problems[a].gen_length != problems[b].gen_length) return problems[a].gen_length < problems[b].gen_length;
    return answer_len(a) < answer_len(b);
  });
  std::vector<std::size_t> by_generated(window.size());
  std::iota(by_generated.begin(), by_generated.end(), std::size_t{0});
  std::stable_sort(by_generated.begin(), by_generated.end(), [&](std::size_t a, std::size_t b) {
    return window[a].generated_tokens < window[b].generated_tokens;
  });
  std::vector<bench_request> out(window.size());
  const double n = static_cast<double>(window.size()), m = static_cast<double>(problems.size());
  for (std::size_t rank = 0; rank < window.size(); ++rank) {
    const auto row = by_generated[rank];
    const auto at = std::min(problems.size() - 1, static_cast<std::size_t>((static_cast<double>(rank) + 0.5) / n * m));
    out[row] = {window[row].t, by_answer[at]};
  }
  return out;
}

double window_rate(const std::vector<bench_request>& reqs) {
  if (reqs.size() < 2) return 1.0;
  const double span = reqs.back().t - reqs.front().t;
  return span > 0 ? static_cast<double>(reqs.size() - 1) / span : 1.0;
}

}  // namespace dls::cli
