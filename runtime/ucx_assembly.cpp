#include "runtime/ucx_assembly.hpp"

namespace dls::runtime {

namespace {

// The part size the first part to arrive implies: its own size, or, for the last part, its
// offset over the parts before it. 0 when it implies none (then admit refuses it).
uint64_t implied_part_bytes(const ucx_frame_header& h) {
  if (h.parts <= 1) return h.total;
  if (h.part + 1 < h.parts) return h.bytes;
  return h.offset % (h.parts - 1) == 0 ? h.offset / (h.parts - 1) : 0;
}

}  // namespace

ucx_assembly::ucx_assembly(const ucx_frame_header& first)
    : total_(first.total), parts_(first.parts), part_bytes_(implied_part_bytes(first)), seen_(first.parts, false) {}

std::string ucx_assembly::admit(const ucx_frame_header& h) {
  const auto id = "ucx transfer " + std::to_string(h.transfer_id) + " refused: ";
  if (h.total != total_ || h.parts != parts_)
    return id + "part " + std::to_string(h.part) + " claims " + std::to_string(h.parts) + " parts and " +
           std::to_string(h.total) + " bytes, the first part " + std::to_string(parts_) + " and " +
           std::to_string(total_);
  // `parts` parts of part_bytes_ each, the last one the rest: divisions only, so nothing wraps.
  const uint64_t s = part_bytes_;
  const bool cut = parts_ == 1 ? h.offset == 0 && h.bytes == total_
                               : s > 0 && total_ / s + (total_ % s != 0) == parts_ && h.offset % s == 0 &&
                                     h.offset / s == h.part &&
                                     h.bytes == (h.part + 1 < parts_ ? s : total_ - h.offset);
  if (!cut)
    return id + "part " + std::to_string(h.part) + " of " + std::to_string(parts_) + " at byte " +
           std::to_string(h.offset) + " with " + std::to_string(h.bytes) + " bytes is not in its place in " +
           std::to_string(total_) + " bytes cut into parts of " + std::to_string(s);
  if (seen_[h.part]) return id + "part " + std::to_string(h.part) + " arrived twice";
  seen_[h.part] = true;
  ++arrived_;
  return {};
}

}  // namespace dls::runtime
