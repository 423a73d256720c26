#pragma once
// The kind of a denoising step under the approximate (dual) KV cache, as the engine runs it and
// as the policies and the simulator cost it: one type for all of them. A refresh is a full
// forward over the whole canvas (the first step of every block); a reuse step computes only
// the block's rows against the cached K/V.
#include <cstdint>

namespace dls::common {

enum class step_kind : std::uint8_t { refresh = 0, reuse = 1 };

}  // namespace dls::common
