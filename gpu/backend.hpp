#pragma once
// The seam between decoding logic and compute. The decoder (canvas, commit rules, engine)
// is shared; a backend only owns kernels and memory: weights on its device, KV cache slots,
// and one batched forward that returns proposals for the rows that need logits.
#include "gpu/canvas.hpp"
#include "gpu/commit.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace dls::gpu {

/// Which slice of the model a tensor-parallel rank computes (Megatron-style: heads and MLP
/// columns split; attention output and MLP down projections are all-reduced).
struct shard_spec {
  int rank = 0;
  int world = 1;
};

/// Per-request key/value memory on the backend's device, for one shard.
class kv_cache {
 public:
  virtual ~kv_cache() = default;
  virtual std::size_t bytes() const = 0;
  /// Serialises the cache (for mid-block migration) and restores it on another worker.
  virtual std::string export_bytes() const = 0;
  virtual void import_bytes(const std::string& bytes) = 0;
};

/// One request's part of a batched step.
struct forward_item {
  const canvas* c = nullptr;
  step_plan plan;
  kv_cache* cache = nullptr;
};

class backend {
 public:
  virtual ~backend() = default;
  virtual std::string name() const = 0;
  virtual shard_spec shard() const = 0;
  virtual std::unique_ptr<kv_cache> make_cache() = 0;
  /// Runs every item's planned forward in one batch and fills proposals[i] with one entry per
  /// masked row of item i's current block (token after optional Gumbel noise, clean confidence).
  virtual void forward(const std::vector<forward_item>& items, std::vector<std::vector<row_proposal>>& proposals) = 0;
  /// Full-precision logits of rows [q0, q1) for a refresh or reuse of one canvas (tests, parity).
  virtual std::vector<float> logits(const canvas& c, const step_plan& plan, kv_cache& cache) = 0;
};

}  // namespace dls::gpu
