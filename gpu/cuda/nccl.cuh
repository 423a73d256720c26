#pragma once
// Internal: the all-reduce a TP rank's backend runs on its stream.
#include "gpu/cuda/common.cuh"

namespace dls::gpu::cuda {

/// Sums data[0..n) across the group's ranks in place (ncclAllReduce, ncclSum, f32), enqueued on
/// `stream`. Every rank ends with the same bits.
void nccl_sum(const nccl_group& g, int rank, float* data, std::size_t n, cudaStream_t stream);

}  // namespace dls::gpu::cuda
