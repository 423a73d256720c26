#pragma once
// What the live step-decision tests share: a small measured-shaped profile, a quality curve and
// a fresh request, so each test states only the situation it decides on.
#include "policies/quality.hpp"
#include "policies/snapshot.hpp"
#include "policies/step_cost.hpp"

#include <cstdint>

namespace dls::test {

/// 1 ms per step plus 0.1 ms per request: a small linear profile on TP 1.
inline policy::step_cost_model small_cost() {
  policy::linear_coeffs c;
  c.fixed_s = 1e-3;
  c.per_request_s = 1e-4;
  return policy::step_cost_model::make_linear({{1, c}});
}

/// Lower tau commits more tokens per step: 1 at 0.9, 4 at 0.7 (the shape of the measured curves).
inline policy::quality_model small_quality() {
  return policy::quality_model({{0.7, 0.6, 4.0}, {0.8, 0.7, 2.0}, {0.9, 0.75, 1.0}});
}

/// A request that has not started: 4 prompt tokens, 16 answer tokens in blocks of 8, at tau 0.9.
inline policy::request_view fresh_request(uint64_t id, double arrival_s, double deadline_s) {
  policy::request_view r;
  r.id = id;
  r.arrival_s = arrival_s;
  r.deadline_s = deadline_s;
  r.tau = 0.9;
  r.prompt_len = 4;
  r.gen_len = 16;
  r.block_len = 8;
  return r;
}

}  // namespace dls::test
