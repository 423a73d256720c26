#pragma once
// The commit rules as pure functions over one step's proposals for the current block.
#include "gpu/decode_params.hpp"

#include <cstdint>
#include <vector>

namespace dls::gpu {

/// The model's proposal for one masked position: its argmax token (after optional Gumbel
/// noise) and the score its rule ranks by (score_of): the softmax probability of that token, or
/// the top-1 minus top-2 probability, or the distribution's negative entropy, each of the
/// distribution the checkpoint's family scores by (sampler_family: clean for LLaDA, l / T for Dream).
struct row_proposal {
  int32_t position = 0;  // canvas row
  int32_t token = 0;
  double confidence = 0.0;
};

/// Returns the positions to commit, most confident first (ties: lower position first).
/// Always at least one when `masked` is non-empty, so every step makes progress.
/// `quota` is the quota rule's count for this step.
std::vector<int32_t> select_commits(std::vector<row_proposal> masked, commit_rule rule, double threshold,
                                    int quota, double factor);

/// Dream's alg_temp: draws `quota` distinct positions (at least one), each draw with probability
/// softmax(confidence / alg_temp) over the positions not yet drawn (torch.multinomial without
/// replacement), in the order drawn. The draws are Gumbel-top-k over a counter-based hash of
/// (seed, counter, position), so a decode is reproducible on any backend and after a migration.
std::vector<int32_t> sample_commits(const std::vector<row_proposal>& masked, int quota, double alg_temp, uint64_t seed,
                                    uint64_t counter);

/// Dream's alg 'origin': each masked position is committed independently with probability
/// `p_transfer` (torch.rand(...) < p_transfer), in position order; possibly none. The uniforms are
/// the counter-based hash of (seed, counter, position) on their own channel, not torch's generator.
std::vector<int32_t> origin_commits(const std::vector<row_proposal>& masked, float p_transfer, uint64_t seed,
                                    uint64_t counter);

/// The quota rule's count for step `step_in_block` of a block that began with `block_masks`
/// masks split over `steps_per_block` steps (LLaDA's get_num_transfer_tokens).
int quota_for_step(int block_masks, int steps_per_block, int step_in_block);

}  // namespace dls::gpu
