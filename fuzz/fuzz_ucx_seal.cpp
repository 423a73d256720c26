// A sealed data-plane part as someone on the path between two node hosts would send it: a frame
// header and a payload of their choosing. The key is made afresh by each run of the harness, as
// the head makes a cluster's, so no input knows it: open_part must refuse every input (a part
// that opens was not sealed with the key, so the tag check let a forgery through), and must
// touch no byte outside the payload. The same bytes sealed under the key with the input's
// geometry must open to themselves, at the receiver they were sealed for only.
#include "runtime/ucx_frame.hpp"
#include "runtime/ucx_seal.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace rt = dls::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const std::string key = rt::make_seal_key();
  static const std::string receiver = "the receiving worker's address", other = "another worker's address";
  rt::ucx_frame_header h;
  if (size < sizeof h) return 0;
  std::memcpy(&h, data, sizeof h);
  const std::string payload(reinterpret_cast<const char*>(data) + sizeof h, size - sizeof h);
  if (!rt::check_frame_header(&h, sizeof h, payload.size()).empty()) return 0;
  if (h.sealed) {
    std::string forged = payload;
    if (rt::open_part(key, receiver, h, forged.data()).empty()) std::abort();
  }
  auto g = h;
  std::string sealed(payload.size(), '\0');
  rt::seal_part(key, receiver, g, payload.data(), sealed.data());
  std::string elsewhere = sealed;
  if (rt::open_part(key, other, g, elsewhere.data()).empty()) std::abort();
  if (!rt::open_part(key, receiver, g, sealed.data()).empty() || sealed != payload) std::abort();
  return 0;
}
