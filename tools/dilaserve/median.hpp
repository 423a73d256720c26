#pragma once
// The statistic every CLI benchmark reports: machines are noisy, so timings are medians.
#include <algorithm>
#include <vector>

namespace dls::cli {

/// The upper median (the middle element of an odd count); 0 for no samples.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace dls::cli
