// UCX data-plane frame headers as they arrive from a peer: a run of headers (the last one
// possibly cut short), each checked as the transport checks it and admitted to its transfer's
// assembly. Whatever a peer sends, an admitted part must lie inside its transfer's buffer, and
// a transfer whose every part was admitted must be tiled by them exactly: no byte written
// twice, none left as the receive buffer held it before.
#include "runtime/ucx_assembly.hpp"
#include "runtime/ucx_frame.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

namespace rt = dls::runtime;

namespace {

struct transfer {
  rt::ucx_assembly parts;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // offset, bytes of each admitted part
};

void check_tiled(const transfer& t) {
  auto r = t.ranges;
  std::sort(r.begin(), r.end());
  uint64_t end = 0;
  for (const auto& [offset, bytes] : r) {
    if (offset != end) std::abort();  // a gap or an overlap
    end = offset + bytes;
  }
  if (end != t.parts.total()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::map<uint64_t, transfer> transfers;
  for (std::size_t at = 0; at < size; at += sizeof(rt::ucx_frame_header)) {
    const std::size_t length = std::min(sizeof(rt::ucx_frame_header), size - at);
    rt::ucx_frame_header h;
    std::memcpy(&h, data + at, length);
    // UCX announces the payload length; here the header's own claim, so the layout is what is tested.
    if (!rt::check_frame_header(data + at, length, static_cast<std::size_t>(h.bytes)).empty()) continue;
    auto it = transfers.find(h.transfer_id);
    if (it == transfers.end()) it = transfers.emplace(h.transfer_id, transfer{rt::ucx_assembly(h), {}}).first;
    auto& t = it->second;
    if (t.parts.failed || !t.parts.admit(h).empty()) {
      t.parts.failed = true;  // as the transport: a refused part fails its transfer
      continue;
    }
    if (h.offset > t.parts.total() || h.bytes > t.parts.total() - h.offset) std::abort();
    t.ranges.emplace_back(h.offset, h.bytes);
    if (t.parts.arrived() == t.parts.parts()) check_tiled(t);
  }
  return 0;
}
