#pragma once
// The decode settings of one entry of a PyTorch golden file (tools/dlm_reference.py writes
// them), as the CPU parity test and the CUDA Dream test both replay them.
#include "gpu/engine.hpp"

#include <nlohmann/json.hpp>

namespace dls::gpu::test {

inline decode_params golden_decode_params(const nlohmann::json& d) {
  decode_params p;
  p.gen_length = d["gen_length"];
  p.block_length = d["block_length"];
  p.rule = parse_commit_rule(d["rule"]);
  p.threshold = d["threshold"];
  p.steps_per_block = d["steps_per_block"];
  p.factor = d["factor"];
  p.top_p = d["top_p"];
  p.top_k = d["top_k"];
  p.cache = parse_cache_mode(d["cache"]);
  return p;
}

}  // namespace dls::gpu::test
