#pragma once
// Moves a request's KV cache between TP degrees: rank r of k holds kv heads
// [r·H/k, (r+1)·H/k) of every row (gpu/backend.hpp, slice_for), so re-sharding joins the
// ranks' rows in rank order and cuts them again at head boundaries. Works on the wire format
// (gpu/kv_wire.hpp), so the source and destination may be different processes.
#include <string>
#include <string_view>
#include <vector>

namespace dls::gpu {

/// The shards of a k-rank cache (wire bytes, rank order) as `to_world` shards; `head_dim`
/// columns per kv head. Throws std::invalid_argument naming the mismatch (shapes, dtypes,
/// heads not divisible by `to_world`).
std::vector<std::string> reshard_kv(const std::vector<std::string_view>& shards, int to_world, int head_dim);

}  // namespace dls::gpu
