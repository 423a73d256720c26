#pragma once
// Measures the CPU engine's step costs (what `dilaserve profile` does) and writes the
// measured profile to `out`; `up` calls it when the cluster file names no profile.
// `longest` > 0 caps the canvas lengths measured (the longest the cluster admits); 0 leaves
// them to the model's positions.
#include <string>
#include <vector>

namespace dls::cli {

void write_profile(const std::string& model, const std::vector<int>& tp, int block, int reps, int longest,
                   const std::string& out);

}  // namespace dls::cli
