#pragma once
// The decoding flags shared by generate, eval and bench-engine.
#include "gpu/backend.hpp"
#include "gpu/decode_params.hpp"
#include "gpu/model.hpp"

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>

namespace dls::cli {

struct decode_flags {
  std::string model = "models/tiny-llada";
  double threshold = 0.9;
  bool one_per_step = false;
  std::string rule;  // empty: threshold, or quota with --one-per-step
  int steps_per_block = 0;
  double factor = 1.0;
  int block = 8;
  std::string cache = "dual";
  std::optional<int> gen_length;
  int refresh_interval = 0;
  double temperature = 0.0;
  uint64_t seed = 0;
  double top_p = 1.0;
  int top_k = 0;
  double alg_temp = 0.0;
  std::string schedule = "even";
  double eps = gpu::dream_default_eps;
  std::string device = "cpu";

  void add_to(CLI::App* sub, bool with_model = true);
  /// Builds the params; throws std::invalid_argument with a one-line reason.
  gpu::decode_params params(int default_gen_length) const;
  /// "tau=0.9" or "one-per-step" etc., for reports.
  std::string label() const;
  /// The engine backend `--device` names (cpu, cuda, cuda:N); throws with a one-line reason.
  std::unique_ptr<gpu::backend> make_backend(std::shared_ptr<const gpu::model> m) const;
};

}  // namespace dls::cli
