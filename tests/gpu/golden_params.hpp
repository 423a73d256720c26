#pragma once
// What the golden files of tools/train_tiny_llada.py and tools/dlm_reference.py hold, read the
// same way by the CPU golden and parity tests and the CUDA Dream test: a decode's settings, and
// a forward entry's canvas with the plan of a full refresh over it.
#include "gpu/canvas.hpp"
#include "gpu/model.hpp"
#include "gpu/engine.hpp"

#include <nlohmann/json.hpp>

#include <vector>

namespace dls::gpu::test {

/// The settings of one entry of "decodes" or "schedule_decodes". Files written before truncation
/// or Dream's schedule existed carry no top_p/top_k/schedule: the defaults are what they decoded with.
inline decode_params golden_decode_params(const nlohmann::json& d) {
  decode_params p;
  p.gen_length = d["gen_length"];
  p.block_length = d["block_length"];
  p.rule = parse_commit_rule(d["rule"]);
  p.threshold = d["threshold"];
  p.steps_per_block = d["steps_per_block"];
  p.factor = d["factor"];
  p.top_p = d.value("top_p", 1.0);
  p.top_k = d.value("top_k", 0);
  p.schedule = parse_step_schedule(d.value("schedule", std::string("even")));
  p.cache = parse_cache_mode(d["cache"]);
  return p;
}

/// The canvas of one "forward" entry (its ids, the model's mask and EOS).
inline canvas golden_canvas(const nlohmann::json& forward, const model_config& m) {
  canvas c;
  c.ids = forward["ids"].get<std::vector<int32_t>>();
  c.mask_id = m.mask_id;
  c.eos_id = m.eos_id;
  return c;
}

/// Every row of `c` as queries and keys: the refresh the goldens' logits were taken with.
inline step_plan full_refresh(const canvas& c) {
  step_plan full;
  full.q0 = 0;
  full.q1 = c.length();
  full.key_rows = c.length();
  return full;
}

/// A forward entry's "reuse": its canvas (two more tokens committed than `refreshed`) and the
/// reuse step over rows [q0, q1) whose logits it holds, against the refresh's cache.
struct golden_reuse {
  canvas c;
  step_plan plan;
};

inline golden_reuse golden_reuse_step(const nlohmann::json& reuse, const canvas& refreshed) {
  golden_reuse out{refreshed, {}};
  out.c.ids = reuse["ids"].get<std::vector<int32_t>>();
  out.plan.kind = step_kind::reuse;
  out.plan.q0 = reuse["q0"].get<int>();
  out.plan.q1 = reuse["q1"].get<int>();
  out.plan.key_rows = out.c.length();
  return out;
}

}  // namespace dls::gpu::test
