#include "gpu/kv_reshard.hpp"

#include "gpu/kv_wire.hpp"

#include <cstring>
#include <stdexcept>

namespace dls::gpu {

std::vector<std::string> reshard_kv(const std::vector<std::string_view>& shards, int to_world, int head_dim) {
  if (shards.empty()) throw std::invalid_argument("kv reshard: no shards");
  if (to_world < 1 || head_dim < 1) throw std::invalid_argument("kv reshard: bad target degree or head size");
  std::vector<kv_dims> in;
  for (auto s : shards) in.push_back(parse_kv_wire(s));
  const kv_dims& first = in[0];
  for (std::size_t r = 1; r < in.size(); ++r) {
    const kv_dims& d = in[r];
    if (d.layers != first.layers || d.rows != first.rows || d.width != first.width || d.dtype != first.dtype)
      throw std::invalid_argument("kv reshard: rank " + std::to_string(r) + "'s cache is " + std::to_string(d.layers) +
                                  "x" + std::to_string(d.rows) + "x" + std::to_string(d.width) + " " +
                                  kv_dtype_name(d.dtype) + ", rank 0's " + std::to_string(first.layers) + "x" +
                                  std::to_string(first.rows) + "x" + std::to_string(first.width) + " " +
                                  kv_dtype_name(first.dtype));
  }
  const std::size_t width = static_cast<std::size_t>(first.width) * in.size();
  if (width % static_cast<std::size_t>(head_dim))
    throw std::invalid_argument("kv reshard: width " + std::to_string(width) + " is not whole heads of " +
                                std::to_string(head_dim));
  const std::size_t heads = width / static_cast<std::size_t>(head_dim);
  if (heads % static_cast<std::size_t>(to_world))
    throw std::invalid_argument("kv reshard: " + std::to_string(heads) + " kv heads do not split over " +
                                std::to_string(to_world) + " ranks");
  const std::size_t el = kv_element_bytes(first.dtype);
  const std::size_t in_row = static_cast<std::size_t>(first.width) * el;
  const std::size_t out_width = width / static_cast<std::size_t>(to_world);
  const std::size_t out_row = out_width * el;
  const std::size_t rows = static_cast<std::size_t>(first.layers) * static_cast<std::size_t>(first.rows);
  std::vector<std::string> out;
  for (int j = 0; j < to_world; ++j)
    out.push_back(kv_wire_buffer({first.layers, first.rows, static_cast<int32_t>(out_width), first.dtype}));
  const kv_dims out_dims{first.layers, first.rows, static_cast<int32_t>(out_width), first.dtype};
  // Column c of the joined row lives in shard c / in_row at c % in_row; copy in runs that
  // stay inside one source shard and one destination shard.
  for (int plane = 0; plane < 2; ++plane) {
    for (std::size_t row = 0; row < rows; ++row) {
      std::size_t col = 0;
      const std::size_t total = in_row * in.size();
      while (col < total) {
        const std::size_t src = col / in_row, src_off = col % in_row;
        const std::size_t dst = col / out_row, dst_off = col % out_row;
        const std::size_t run = std::min(in_row - src_off, out_row - dst_off);
        const char* from = shards[src].data() + kv_header_bytes + plane * first.plane_bytes() + row * in_row + src_off;
        char* to = &out[dst][kv_header_bytes + plane * out_dims.plane_bytes() + row * out_row + dst_off];
        std::memcpy(to, from, run);
        col += run;
      }
    }
  }
  return out;
}

}  // namespace dls::gpu
