#pragma once
// Quality model: expected answer accuracy and mean tokens committed per step as functions
// of the confidence threshold tau, by piecewise-linear interpolation between measured points.
// Sources: the published Fast-dLLM LLaDA-8B GSM8K sweep (configs/sim/quality/), or a curve
// measured with `dilaserve eval --json` on the shipped model. Format: docs/policies.md.
#include <string>
#include <vector>

namespace dls::policy {

struct quality_point {
  quality_point() = default;
  quality_point(double tau_, double accuracy_, double tokens_per_step_)
      : tau(tau_), accuracy(accuracy_), tokens_per_step(tokens_per_step_) {}
  double tau = 0;              // 1.0 also stands for one-token-per-step decoding
  double accuracy = 0;         // fraction in [0, 1]
  double tokens_per_step = 1;  // mean committed tokens per denoising step, >= 1
  // How many steps the measured blocks took (`dilaserve eval`'s block_steps): entry k is the
  // number of blocks of `block_length` masks decoded in k + 1 steps. Empty where not measured.
  std::vector<double> block_steps;
  int block_length = 0;
};

class quality_model {
 public:
  quality_model() = default;
  /// Points need not be sorted; duplicates of one tau are averaged. Throws when empty.
  explicit quality_model(std::vector<quality_point> points);

  double accuracy(double tau) const;
  double tokens_per_step(double tau) const;
  /// Expected denoising steps to finish `masks` masked positions (>= 1 per step).
  double steps_for(int masks, double tau) const;
  /// The probability that a block of `block_len` masks takes k + 1 steps at tau, entry k: the
  /// measured block_steps of the two points around tau, mixed by the interpolation weight.
  /// Empty unless both hold them for this block length.
  std::vector<double> measured_block_steps(int block_len, double tau) const;
  /// Refresh steps per step of a block at tau: 1 / steps_for without refresh_interval (only a
  /// block's first step refreshes), else E[ceil(s / refresh_interval)] / E[s] over the block's
  /// step count s: measured_block_steps where there are any, else the two integers around
  /// steps_for, weighted so the mean is steps_for.
  double refresh_share(int block_len, double tau) const;
  /// Steps per refresh step: what the step-cost predictions take as `steps_per_block` (the
  /// refresh fraction of a step is its inverse). steps_for(block_len, tau) without
  /// refresh_interval.
  double steps_per_refresh(int block_len, double tau) const;
  /// Expected refreshes in a block's `left` remaining steps after `done` steps (done >= 1):
  /// the step indices done .. done + left - 1 that refresh_interval divides.
  double refreshes_left_in_block(int done, double left) const;
  double tau_min() const { return pts_.front().tau; }
  double tau_max() const { return pts_.back().tau; }
  const std::vector<quality_point>& points() const { return pts_; }

  std::string source;
  /// The engine's engine.refresh_interval: a step inside a block whose index it divides is a
  /// refresh too; 0 refreshes at a block's first step only. Set by whoever reads the curve with
  /// the cluster's engine settings (it is a property of decoding, not of the curve's file).
  void set_refresh_interval(int every);
  int refresh_interval() const { return refresh_interval_; }

 private:
  // The points around tau and the interpolation weight (one point twice at and beyond the ends).
  struct bracket {
    const quality_point* lo;
    const quality_point* hi;
    double w;
  };
  bracket around(double tau) const;
  double interp(double tau, double quality_point::*field) const;
  std::vector<quality_point> pts_;
  int refresh_interval_ = 0;
  // Per point, over its measured blocks: E[steps] and E[refreshes] at refresh_interval_. Kept
  // here because refresh_share runs for every request in every decision.
  struct block_moments {
    double steps = 0, refreshes = 0;
  };
  std::vector<block_moments> moments_;
};

/// Parses either a YAML/JSON map {source, points: [{tau, accuracy, tokens_per_step}]},
/// (each point may add block_steps: [n1, n2, ...] and block_length, as eval writes them),
/// a YAML list of such points, or a JSON array of `dilaserve eval --json` objects
/// ({"threshold": tau|null, "accuracy", "tokens_per_step", ...}; null means one token per
/// step and maps to tau = 1). Accuracy above 1 is read as a percentage.
quality_model parse_quality_curve(const std::string& text);
quality_model load_quality_curve(const std::string& path);

}  // namespace dls::policy
