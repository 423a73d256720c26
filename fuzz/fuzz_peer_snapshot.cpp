// A peer-kept recovery snapshot as it lands at the keeper over UCX: a damaged frame must end in
// std::invalid_argument, and an accepted one must frame again to the very same bytes and be kept
// by the store (ASan checks the copies).
#include "runtime/peer_snapshot.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto s = dls::runtime::decode_peer_snapshot(bytes);
    if (dls::runtime::encode_peer_snapshot(s) != bytes) std::abort();
    dls::runtime::snapshot_store store(2);
    const auto id = s.request_id;
    store.put(std::move(s));
    if (!store.find(id) || store.bytes() + 24 != bytes.size()) std::abort();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
