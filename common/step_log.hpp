#pragma once
// One line per step of a TP group, written the same way by a live group (DILASERVE_STEP_LOG)
// and by the simulator (`dilaserve sim --step-log`), so that the two can be set side by side
// step by step (tools/sim_vs_live_steps.py).
#include <cstdint>
#include <fstream>
#include <string>

namespace dls {

struct step_record {
  std::string run;       // which run or group the step belongs to (a sim run's policy@load, a live group)
  double start_s = 0;    // when it was dispatched: unix seconds live, virtual seconds simulated
  double wall_s = 0;     // dispatch to the last rank's answer (live), the step's duration (sim)
  double engine_s = 0;   // the slowest rank inside the engine (live); the profile's time (sim)
  double predicted_s = 0;  // the step-cost profile's time for the batch
  int batch = 0;         // requests in the step
  int refreshes = 0;     // of which a refresh, as the group planned it (the profile's prediction counts these)
  int ran_refreshes = 0; // ... as the engine ran it (live: rank 0's reports; the simulator: the same)
  double query_rows = 0, key_rows = 0;
  int active = 0;        // admitted requests of the group when it was dispatched
  int waiting = 0;       // queued, not admitted
};

/// Appends step_records as CSV lines to a file (the header first when the file is new).
/// Buffered; flushed every `flush_every` lines and when closed.
class step_log {
 public:
  /// Throws std::runtime_error naming the path when it cannot be opened.
  explicit step_log(const std::string& path, int flush_every = 256);
  ~step_log();
  step_log(const step_log&) = delete;
  step_log& operator=(const step_log&) = delete;
  void append(const step_record& r);

  static const char* header();

 private:
  std::ofstream out_;
  int pending_ = 0;
  int flush_every_;
};

}  // namespace dls
