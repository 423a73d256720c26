#pragma once
// The CPU backend: f32 compute on one core per device slot through OpenBLAS.
#include "gpu/allreduce.hpp"
#include "gpu/backend.hpp"
#include "gpu/model.hpp"

#include <memory>

namespace dls::gpu {

/// `ar` may be null for world 1; for world > 1 every rank calls forward() on the same batch
/// at the same time from its own thread.
std::unique_ptr<backend> make_cpu_backend(std::shared_ptr<const model> m, shard_spec shard = {},
                                          allreduce* ar = nullptr);

}  // namespace dls::gpu
