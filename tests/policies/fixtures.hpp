#pragma once
// Hand-made models for policy tests: numbers chosen so expected answers can be worked out
// on paper in the test comments.
#include "policies/quality.hpp"
#include "policies/snapshot.hpp"
#include "policies/step_cost.hpp"

#include <string>

namespace dls::test {

/// Every step costs `fixed_s` plus `per_row_s` per query row, on every TP degree given.
inline policy::step_cost_model flat_cost(double fixed_s, double per_row_s = 0.0,
                                         std::vector<int> tps = {1}) {
  std::map<int, policy::linear_coeffs> c;
  for (int tp : tps) c[tp] = {fixed_s, 0.0, per_row_s, 0.0, 0.0};
  return policy::step_cost_model::make_linear(c);
}

/// tokens_per_step 16 at every tau (2 steps per 32-token block); accuracy rises with tau.
inline policy::quality_model two_step_quality() {
  return policy::quality_model({{0.7, 0.70, 16.0}, {0.9, 0.90, 16.0}});
}

inline policy::quality_model fastdllm_quality() {
  return policy::load_quality_curve(std::string(DLS_SOURCE_DIR) +
                                    "/configs/sim/quality/fastdllm-llada8b-gsm8k.yaml");
}

inline policy::step_cost_model h100_roofline() {
  return policy::load_step_cost_profile(std::string(DLS_SOURCE_DIR) +
                                        "/configs/sim/profiles/llada8b-h100-roofline.yaml");
}

inline policy::request_view request(std::uint64_t id, double arrival, double deadline, int prompt,
                                    int gen, double tau = 0.9) {
  policy::request_view r;
  r.id = id;
  r.arrival_s = arrival;
  r.deadline_s = deadline;
  r.prompt_len = prompt;
  r.gen_len = gen;
  r.tau = tau;
  return r;
}

}  // namespace dls::test
