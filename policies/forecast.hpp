#pragma once
// The load forecast the reconfiguration optimizer plans for, from the arrivals seen so far:
// the rate is a high quantile of the arrival rate over sub-windows of the recent window (so a
// burst counts as a burst, not as its mean), the sustained rate is the mean over the window,
// and the length mix comes from every arrival kept (the window may be empty when idle, and an
// idle cluster still plans for the requests it serves).
#include "policies/snapshot.hpp"

#include <vector>

namespace dls::policy {

struct arrival_record {
  double t_s = 0;      // arrival time on the caller's clock
  int prompt_len = 0;  // tokens (or the caller's estimate of them)
  int gen_len = 0;
  /// Its SLO window, deadline - arrival (seconds; 0: not known). The tau cap's demand test
  /// (threshold.hpp) needs it to tell which predicted arrivals would be due before whom.
  double window_s = 0;
};

struct forecast_config {
  double window_s = 5.0;
  int subwindows = 4;        // rate samples within the window
  double quantile = 0.9;     // forecast rate = this quantile of the samples
  int max_classes = 16;      // length classes of the mix, the most frequent shapes
};

/// `arrivals` in time order, all at or before `now_s`. An empty mix when nothing arrived yet.
forecast forecast_from_arrivals(const std::vector<arrival_record>& arrivals, double now_s, const forecast_config& cfg);

}  // namespace dls::policy
