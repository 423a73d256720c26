#pragma once
// The load forecast the reconfiguration optimizer plans for, from the arrivals seen so far:
// the rate is a high quantile of the arrival rate over sub-windows of the recent window (so a
// burst counts as a burst, not as its mean), the sustained rate is the mean over the window,
// and the length mix comes from the latest arrivals (the window may be empty when idle, and an
// idle cluster still plans for the requests it serves). The live reconfigurer and the
// simulator both forecast with forecast_from_arrivals, from the same cluster-file keys.
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
  double subwindow_s = 0.5;   // rate samples: the window in pieces of about this length
  double quantile = 0.9;      // forecast rate = this quantile of the samples
  int max_classes = 16;       // length classes of the mix
  int max_mix_arrivals = 4096;  // the mix is drawn from at most this many of the latest arrivals
  int block_len = 32;         // answers are whole blocks of this many tokens
};

/// A request's shape as the length mix sees it.
struct request_shape {
  int prompt_len = 0;
  int gen_len = 0;
};

/// Quantile classes of request shapes: sorted by canvas length (P + G), cut into at most
/// `classes` classes of equal count, each the mean prompt and the mean answer in whole blocks of
/// `block_len` (at least one), weighted by its share. Empty when `shapes` is.
std::vector<length_class> length_mix(std::vector<request_shape> shapes, int classes, int block_len);

/// `arrivals` in time order, all at or before `now_s`. An empty mix when nothing arrived yet.
forecast forecast_from_arrivals(const std::vector<arrival_record>& arrivals, double now_s, const forecast_config& cfg);

/// The forecast a deployment provisions its first layout from: a history of its own traffic
/// (`history` in time order) taken whole, as forecast_from_arrivals takes its window: the burst
/// quantile over sub-windows of the whole span, the mean rate over it, and the length mix of
/// every arrival. Only these aggregates enter; no single arrival time does. Both the live
/// `dilaserve provision` and the simulator's boot layout plan from it. Empty when `history` is.
forecast provisioning_forecast(const std::vector<arrival_record>& history, const forecast_config& cfg);

}  // namespace dls::policy
