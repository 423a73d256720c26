// Canvas bytes, as they arrive when a request moves between TP groups: a corrupt buffer must end in
// std::invalid_argument. A canvas it accepts must serialise back to bytes that parse to the same
// canvas, and must be safe to run: a few steps commit the current block's masked rows as the
// engine would.
#include "gpu/canvas.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int max_steps = 64;  // enough to cross block boundaries; keeps each run short

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  dls::gpu::canvas c;
  try {
    c = dls::gpu::canvas::from_bytes(bytes);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  const std::string again = c.to_bytes();
  if (dls::gpu::canvas::from_bytes(again).to_bytes() != again) std::abort();  // not a round trip
  (void)c.answer();
  (void)c.tokens_per_step();
  for (int s = 0; s < max_steps && !c.finished; ++s) {
    const auto plan = c.next_step();
    if (plan.q0 < 0 || plan.q1 > c.length() || plan.q0 > plan.q1 || plan.block0 < 0 || plan.block1 > c.length())
      std::abort();  // a step the engine would run out of the canvas
    std::vector<dls::gpu::row_proposal> proposals;
    for (int pos = plan.block0; pos < plan.block1; ++pos)
      if (c.ids[static_cast<std::size_t>(pos)] == c.mask_id)
        proposals.push_back({pos, pos % 7 == 0 ? c.eos_id : pos, 1.0 / (1 + pos - plan.block0)});
    if (proposals.empty()) break;  // a block with no mask left: apply() refuses it by contract
    c.apply(proposals);
  }
  return 0;
}
