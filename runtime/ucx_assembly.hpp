#pragma once
// The receiving side's record of one transfer that arrives in parts: which parts came, how
// many passed their checksum, and what is still being received or checked. Pure bookkeeping
// (no UCX): the transport owns the buffer the parts land in and gives it back only when
// nothing is in flight on it.
#include "runtime/ucx_frame.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace dls::runtime {

class ucx_assembly {
 public:
  /// From the first part to arrive (any part may be first).
  explicit ucx_assembly(const ucx_frame_header& first);

  /// "" if `h` is a part of this transfer not seen before and in its place, else why it is not
  /// (the transfer then fails: a sender never sends a part twice, changes the total, or cuts
  /// the buffer other than into `parts` consecutive parts of one size, the last the rest).
  /// So the parts admitted tile the buffer: no byte is written twice, and a transfer whose
  /// parts all passed their checksums holds no byte that did not arrive with them.
  std::string admit(const ucx_frame_header& h);
  /// One admitted part passed its checksum.
  void part_checked() { ++checked_; }
  /// Every part arrived and passed its checksum.
  bool whole() const { return checked_ == parts_; }

  uint64_t total() const { return total_; }
  uint32_t parts() const { return parts_; }
  uint32_t arrived() const { return arrived_; }

  int in_flight = 0;    // receives and checks started and not yet finished
  bool failed = false;  // the waiter got an error; later parts are dropped

 private:
  uint64_t total_;
  uint32_t parts_;
  uint64_t part_bytes_;  // every part's size but the last's, from the first part to arrive
  std::vector<bool> seen_;
  uint32_t arrived_ = 0;
  uint32_t checked_ = 0;
};

}  // namespace dls::runtime
