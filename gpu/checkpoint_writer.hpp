#pragma once
// Writes random-weight checkpoints in the exact Hugging Face layouts of the two families the
// engine runs: config.json with the family's own field names, bf16 shards named as
// save_pretrained names them (model-0000k-of-0000n.safetensors) and model.safetensors.index.json.
// Weights stream to disk a chunk at a time, so an 8B-shaped checkpoint needs no 16 GB of memory.
#include "gpu/model_config.hpp"

#include <cstdint>
#include <string>

namespace dls::gpu {

struct checkpoint_summary {
  int shards = 0;
  int64_t tensors = 0;
  int64_t weight_bytes = 0;  // the index's total_size
};

/// The shape of a published checkpoint by name: "llada-8b" or "dream-7b"; throws
/// std::invalid_argument naming the choices otherwise.
model_config published_shape(const std::string& name);

/// Writes `cfg` with deterministic random bf16 weights (uniform, variance 1/fan_in; norms 1) into
/// `dir` (created), in shards of at most `max_shard_bytes` each (whole tensors, in checkpoint
/// order). Throws load_error naming the file on an I/O problem.
checkpoint_summary write_random_checkpoint(const std::string& dir, const model_config& cfg, uint64_t seed,
                                           int64_t max_shard_bytes);

}  // namespace dls::gpu
