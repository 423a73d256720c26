#pragma once
// Attention for the few query rows of a dual-cache reuse step (a block against every cached key).
// With 8-32 queries, OpenBLAS's two products per head run at a fraction of its large-M rate and
// repack K and V on every call. Here the scores are computed transposed (keys x queries), so the
// only operand to pack is the block's queries, and the softmax runs down columns; the weighted sum
// then reads V rows where they lie in the cache.
#include <vector>

namespace dls::gpu::cpu {

/// Whether attention of `tq` query rows with head size `hd` takes this path on this CPU.
bool small_attention_fits(int tq, int hd);

/// Same contract as cpu::attention (gpu/cpu_kernels.hpp); requires small_attention_fits(tq, hd).
void small_attention(const float* q, int tq, int ldq, const float* k, const float* v, int tk, int ldk, int heads,
                     int kv_heads, int hd, float* out, int ldo, std::vector<float>& scratch);

}  // namespace dls::gpu::cpu
