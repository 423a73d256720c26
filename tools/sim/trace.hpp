#pragma once
// Workloads for the simulator: the Azure LLM inference trace (CSV) or synthetic Poisson /
// gamma arrivals, turned into DLM requests (canvas lengths) and scaled to a load.
#include "policies/quality.hpp"
#include "policies/snapshot.hpp"
#include "policies/step_cost.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dls::sim {

/// One trace row: arrival (seconds from the first row), context and generated tokens.
struct trace_row {
  double t = 0;
  int context_tokens = 0;
  int generated_tokens = 0;
  /// Tokens of the blocks the decode ran before the answer's EOS ended it (a live bench's
  /// arrivals.csv); 0: the decode runs all of generated_tokens.
  int decoded_tokens = 0;
};

/// Reads `TIMESTAMP,ContextTokens,GeneratedTokens[,DecodedTokens]`. TIMESTAMP may be seconds or
/// "YYYY-MM-DD HH:MM:SS.fffffff" (Azure 2023); rows are sorted by time. DecodedTokens (a live
/// bench's arrivals.csv): the canvas holds GeneratedTokens, and the decode stops after the
/// blocks holding DecodedTokens, as a live decode stops at the block of its EOS.
std::vector<trace_row> load_azure_csv(const std::string& path);

struct synthetic_spec {
  std::string kind = "poisson";   // poisson | gamma
  double rate = 1.0;              // mean arrivals per second
  double burstiness = 1.0;        // gamma: coefficient of variation of inter-arrival gaps
  // Lengths: log-normal with these medians and 99th percentiles (defaults: the Azure 2023
  // code trace, context p50 1,469 p99 7,436; generated p50 13 p99 252).
  double context_p50 = 1469, context_p99 = 7436;
  double generated_p50 = 13, generated_p99 = 252;
};
std::vector<trace_row> synthetic_trace(const synthetic_spec& spec, std::size_t n, std::uint64_t seed);

/// Repeats the trace back to back until it has `n` rows (or truncates it).
std::vector<trace_row> resize_trace(const std::vector<trace_row>& rows, std::size_t n);

/// Mean arrival rate of a trace: (rows - 1) / span.
double trace_rate(const std::vector<trace_row>& rows);

/// Canvas of a DLM request: G = generated rounded up to whole blocks (the block holding EOS
/// completes), P = context clamped so P + G <= max_canvas (inputs <= 4,096 as in DiLaServe);
/// G gives way first, down to what leaves the prompt its length or half the canvas.
struct canvas_shape {
  int prompt_len;
  int gen_len;
  int answer_blocks = 0;  // blocks decoded before the answer ends (decoded_tokens); 0: all
};
canvas_shape to_canvas(const trace_row& r, int block_len, int max_canvas);

/// Quantile classes of canvas shapes (policy::length_mix), for the capacity estimate and the
/// boot layout's forecast.
std::vector<policy::length_class> length_mix(const std::vector<canvas_shape>& shapes, int classes, int block_len);

}  // namespace dls::sim
