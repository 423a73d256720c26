#include "gpu/commit.hpp"

#include "gpu/noise_hash.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace dls::gpu {

int quota_for_step(int block_masks, int steps_per_block, int step_in_block) {
  if (steps_per_block <= 0) return 1;
  int q = block_masks / steps_per_block + (step_in_block < block_masks % steps_per_block ? 1 : 0);
  return std::max(q, 1);
}

std::vector<int32_t> select_commits(std::vector<row_proposal> masked, commit_rule rule, double threshold,
                                    int quota, double factor) {
  std::sort(masked.begin(), masked.end(), [](const row_proposal& a, const row_proposal& b) {
    if (a.confidence != b.confidence) return a.confidence > b.confidence;
    return a.position < b.position;
  });
  std::size_t n = 0;
  switch (rule) {
    case commit_rule::quota:
    case commit_rule::margin:
    case commit_rule::entropy: n = static_cast<std::size_t>(std::max(quota, 1)); break;
    case commit_rule::origin: throw std::logic_error("select_commits: origin ranks nothing (origin_commits draws)");
    case commit_rule::threshold:
      while (n < masked.size() && masked[n].confidence >= threshold) ++n;
      break;
    case commit_rule::factor:
      // Fast-dLLM's bound: n tokens each with p > 1-eps decode as greedy when (n+1)eps <= f.
      n = 1;
      while (n < masked.size() && masked[n].confidence >= 1.0 - factor / static_cast<double>(n + 2)) ++n;
      break;
  }
  n = std::min(std::max<std::size_t>(n, 1), masked.size());
  std::vector<int32_t> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) out.push_back(masked[i].position);
  return out;
}

// Token noise uses the same coordinates with the token id (>= 0); negative ids keep the position
// draws apart from it and from each other.
constexpr int32_t position_draw = -1;
constexpr int32_t origin_draw = -2;

std::vector<int32_t> sample_commits(const std::vector<row_proposal>& masked, int quota, double alg_temp, uint64_t seed,
                                    uint64_t counter) {
  std::vector<std::pair<double, int32_t>> keys;
  keys.reserve(masked.size());
  for (const auto& m : masked) {
    const double g = -std::log(-std::log(noise_uniform(seed, counter, m.position, position_draw)));
    keys.emplace_back(m.confidence / alg_temp + g, m.position);
  }
  std::sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first > b.first;
    return a.second < b.second;
  });
  const std::size_t n = std::min(static_cast<std::size_t>(std::max(quota, 1)), keys.size());
  std::vector<int32_t> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) out.push_back(keys[i].second);
  return out;
}

std::vector<int32_t> origin_commits(const std::vector<row_proposal>& masked, float p_transfer, uint64_t seed,
                                    uint64_t counter) {
  std::vector<int32_t> out;
  for (const auto& m : masked)
    if (noise_uniform(seed, counter, m.position, origin_draw) < static_cast<double>(p_transfer)) out.push_back(m.position);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace dls::gpu
