#include "runtime/ucx_assembly.hpp"

namespace dls::runtime {

ucx_assembly::ucx_assembly(const ucx_frame_header& first)
    : total_(first.total), parts_(first.parts), seen_(first.parts, false) {}

std::string ucx_assembly::admit(const ucx_frame_header& h) {
  const auto id = "ucx transfer " + std::to_string(h.transfer_id) + " refused: ";
  if (h.total != total_ || h.parts != parts_)
    return id + "part " + std::to_string(h.part) + " claims " + std::to_string(h.parts) + " parts and " +
           std::to_string(h.total) + " bytes, the first part " + std::to_string(parts_) + " and " +
           std::to_string(total_);
  if (seen_[h.part]) return id + "part " + std::to_string(h.part) + " arrived twice";
  seen_[h.part] = true;
  ++arrived_;
  return {};
}

}  // namespace dls::runtime
