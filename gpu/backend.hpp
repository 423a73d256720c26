#pragma once
// The seam between decoding logic and compute. The decoder (canvas, commit rules, engine)
// is shared; a backend only owns kernels and memory: weights on its device, KV cache slots,
// and one batched forward that returns proposals for the rows that need logits.
#include "gpu/canvas.hpp"
#include "gpu/commit.hpp"
#include "gpu/model_config.hpp"

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dls::gpu {

/// Which slice of the model a tensor-parallel rank computes (Megatron-style: heads and MLP
/// columns split; attention output and MLP down projections are all-reduced).
struct shard_spec {
  int rank = 0;
  int world = 1;
};

/// The heads and MLP columns one rank computes, the same on every backend.
struct shard_slice {
  int heads = 0, kv_heads = 0;  // per rank
  int h0 = 0, kvh0 = 0;         // this rank's first query head and first kv head
  int f0 = 0, f1 = 0;           // this rank's MLP columns [f0, f1)
};

/// Throws std::invalid_argument when the shard is out of range or its degree does not divide
/// the head counts (MLP columns may split unevenly).
inline shard_slice slice_for(const model_config& c, shard_spec s) {
  if (s.world < 1 || s.rank < 0 || s.rank >= s.world) throw std::invalid_argument("bad shard spec");
  if (c.n_heads % s.world || c.n_kv_heads % s.world)
    throw std::invalid_argument("TP degree " + std::to_string(s.world) + " does not divide the head count");
  shard_slice sl;
  sl.heads = c.n_heads / s.world;
  sl.kv_heads = c.n_kv_heads / s.world;
  sl.h0 = sl.heads * s.rank;
  sl.kvh0 = sl.kv_heads * s.rank;
  sl.f0 = c.mlp_hidden * s.rank / s.world;
  sl.f1 = c.mlp_hidden * (s.rank + 1) / s.world;
  return sl;
}

/// Per-request key/value memory on the backend's device, for one shard.
class kv_cache {
 public:
  virtual ~kv_cache() = default;
  virtual std::size_t bytes() const = 0;
  /// Serialises the cache in its own dtype (gpu/kv_wire.hpp, for mid-block migration) and
  /// restores one of either dtype on another worker; throws std::invalid_argument on bad bytes.
  virtual std::string export_bytes() const = 0;
  virtual void import_bytes(std::string_view bytes) = 0;
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
  /// Transformer layers of the model, the unit of a layer-split refresh.
  virtual int layers() const = 0;
  /// 1 when the logits of row p - 1 propose token p (Dream), 0 when row p's do (LLaDA); a reuse
  /// step then also computes the row before the block (canvas::next_step).
  virtual int logit_shift() const { return 0; }
  /// Whether forward() can rank proposals by `s` (the margin and entropy rules need it).
  virtual bool scores(proposal_score s) const { return s == proposal_score::probability; }
  /// Whether forward() can truncate token distributions by top_p / top_k (Dream's sampler).
  virtual bool truncates() const { return false; }
  virtual std::unique_ptr<kv_cache> make_cache() = 0;
  /// Runs every item's planned forward in one batch and fills proposals[i] with one entry per
  /// masked row of item i's current block (token after optional Gumbel noise, and the score
  /// of its family's distribution, sampler_of);
  /// none for an item whose layer range stops before the last layer.
  virtual void forward(const std::vector<forward_item>& items, std::vector<std::vector<row_proposal>>& proposals) = 0;
  /// Full-precision logits of rows [q0, q1) for a refresh or reuse of one canvas (tests, parity).
  virtual std::vector<float> logits(const canvas& c, const step_plan& plan, kv_cache& cache) = 0;
};

}  // namespace dls::gpu
