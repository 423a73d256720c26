#pragma once
// One denoising step for a batch of requests, on any backend. Each request's canvas decides
// what the step computes (refresh or reuse, which rows); the backend runs the batch; the
// canvas applies its commit rule. Every step reports its kind, rows and wall time, which the
// step-cost model needs.
#include "gpu/backend.hpp"
#include "gpu/canvas.hpp"

#include <memory>
#include <string>
#include <vector>

namespace dls::gpu {

/// A request as a worker holds it: its canvas and its KV cache on this worker's device.
struct request_slot {
  canvas c;
  std::unique_ptr<kv_cache> cache;
};

struct step_report {
  step_kind kind = step_kind::refresh;
  int query_rows = 0;
  int key_rows = 0;
  int committed = 0;
  double seconds = 0.0;  // wall time of the whole batched step this request was part of
  bool finished = false;
  /// A layer range of a split refresh that stopped before the last layer: no tokens were
  /// committed and the canvas' step counters did not move.
  bool partial = false;
  int layers = 0;        // layers this step ran for the request
};

class engine {
 public:
  explicit engine(std::unique_ptr<backend> b);
  backend& device() { return *backend_; }

  /// Wraps a canvas with a fresh cache from this engine's backend.
  request_slot admit(canvas c);
  /// Wraps `c` with a cache rebuilt by one forward over `kv_source`, the canvas its last
  /// refresh ran on: the rows a reuse step does not recompute then hold exactly what they held
  /// where the request came from, so a canvas moved mid-block decodes the tokens it would
  /// have decoded there. Throws std::invalid_argument when `kv_source` cannot be that canvas.
  request_slot admit_rebuilt(canvas c, const canvas& kv_source);
  /// One step for every unfinished slot in `batch`; reports are in batch order. With
  /// `layer_limits` (one per slot, 0: no limit), a slot whose next step is a refresh runs at
  /// most that many of its remaining layers (a layer-split refresh); it commits when a step
  /// reaches the last layer, with the same tokens as a whole refresh.
  std::vector<step_report> step(const std::vector<request_slot*>& batch, const std::vector<int>& layer_limits = {});

 private:
  std::unique_ptr<backend> backend_;
  std::vector<forward_item> items_;
  std::vector<std::vector<row_proposal>> proposals_;
};

/// Why `kv_source` cannot rebuild the cache of `c` (see engine::admit_rebuilt); empty when it can.
std::string rebuild_problem(const canvas& c, const canvas& kv_source);

/// Decodes every slot to completion in batches of at most `max_batch`, stepping the
/// unfinished ones together. Returns the number of batched steps run.
int decode_all(engine& e, std::vector<request_slot>& slots, int max_batch);

}  // namespace dls::gpu
