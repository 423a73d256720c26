#pragma once
// Quality model: expected answer accuracy and mean tokens committed per step as functions
// of the confidence threshold tau, by piecewise-linear interpolation between measured points.
// Sources: the published Fast-dLLM LLaDA-8B GSM8K sweep (configs/sim/quality/), or a curve
// measured with `dilaserve eval --json` on the shipped model. Format: docs/policies.md.
#include <string>
#include <vector>

namespace dls::policy {

struct quality_point {
  double tau = 0;              // 1.0 also stands for one-token-per-step decoding
  double accuracy = 0;         // fraction in [0, 1]
  double tokens_per_step = 1;  // mean committed tokens per denoising step, >= 1
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
  double tau_min() const { return pts_.front().tau; }
  double tau_max() const { return pts_.back().tau; }
  const std::vector<quality_point>& points() const { return pts_; }

  std::string source;

 private:
  double interp(double tau, double quality_point::*field) const;
  std::vector<quality_point> pts_;
};

/// Parses either a YAML/JSON map {source, points: [{tau, accuracy, tokens_per_step}]},
/// a YAML list of such points, or a JSON array of `dilaserve eval --json` objects
/// ({"threshold": tau|null, "accuracy", "tokens_per_step", ...}; null means one token per
/// step and maps to tau = 1). Accuracy above 1 is read as a percentage.
quality_model parse_quality_curve(const std::string& text);
quality_model load_quality_curve(const std::string& path);

}  // namespace dls::policy
