#pragma once
// The per-request decoding state. Small and serializable: it is the unit that migrates
// between TP groups at a refresh boundary (only the KV cache must move mid-block).
#include "gpu/commit.hpp"
#include "gpu/decode_params.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dls::gpu {

/// What the next denoising step of a canvas computes.
struct step_plan {
  step_kind kind = step_kind::refresh;
  int q0 = 0, q1 = 0;          // query rows [q0, q1)
  int block0 = 0, block1 = 0;  // rows of the current block: the rows that need logits
  int key_rows = 0;            // the whole canvas
  /// Layers [layer0, layer1) this step runs; -1: through the last. Only a refresh may run a
  /// part (a layer-split refresh): its rows' hidden states wait in the KV cache between steps,
  /// and only the part that reaches the last layer yields logits.
  int layer0 = 0, layer1 = -1;
  int query_rows() const { return q1 - q0; }
};

struct canvas {
  std::vector<int32_t> ids;  // prompt followed by the answer region (mask id where undecided)
  int32_t prompt_len = 0;
  int32_t mask_id = 0;
  int32_t eos_id = 0;
  decode_params params;
  int32_t block = 0;          // current block index within the answer region
  int32_t step_in_block = 0;  // steps already taken in the current block
  int32_t block_masks = 0;    // masks when the current block began (quota rule)
  int64_t steps = 0;          // denoising steps taken (NFE); also the Gumbel noise counter
  int64_t refresh_steps = 0;
  int64_t reuse_steps = 0;
  int64_t committed = 0;      // answer tokens committed so far, EOS fill included
  bool finished = false;
  /// Layers of the pending refresh already run (layer-split refresh). Not serialised: a
  /// canvas that moves starts its refresh over, since the partial state stays behind.
  int32_t refresh_layers_done = 0;

  /// A fresh canvas: prompt + gen_length masks. Throws std::invalid_argument on bad params.
  static canvas start(const std::vector<int32_t>& prompt, const decode_params& params, int32_t mask_id,
                      int32_t eos_id);

  int length() const { return static_cast<int>(ids.size()); }
  int num_blocks() const;
  int block_begin() const;
  int block_end() const;
  /// True when the next step recomputes the whole sequence, so no KV cache needs to move.
  bool at_refresh_boundary() const;
  /// With `logit_shift` 1 (Dream: row p - 1 proposes token p) a reuse step's query rows start
  /// one row before the block, so that the block's first token has its logits; that row's key
  /// and value are recomputed and stored like the block's.
  step_plan next_step(int logit_shift = 0) const;
  /// Commits the chosen proposals of the step just run and advances blocks; returns the count.
  int apply(const std::vector<row_proposal>& block_proposals);
  /// Answer tokens up to the first EOS (or undecided position).
  std::vector<int32_t> answer() const;
  double tokens_per_step() const { return steps ? static_cast<double>(committed) / static_cast<double>(steps) : 0.0; }
  void set_threshold(double tau) { params.threshold = tau; }

  std::string to_bytes() const;
  /// Throws std::invalid_argument naming the problem on a corrupt or truncated buffer.
  static canvas from_bytes(const std::string& bytes);
};

}  // namespace dls::gpu
