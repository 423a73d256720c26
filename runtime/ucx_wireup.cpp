#include "runtime/ucx_wireup.hpp"

#include "runtime/log.hpp"

#include <memory>

namespace dls::runtime {

void send_wireup_ping(ucx_transport& t, const std::string& peer_address, uint64_t id, ucx_transport::send_done done) {
  auto self = std::make_shared<const std::string>(t.address());
  t.send(peer_address, id, std::move(self),
         ucx_transport::clock::now() + std::chrono::milliseconds(t.config().timeout_ms), std::move(done));
}

std::optional<std::pair<uint64_t, std::string>> answer_wireup(ucx_transport& t, uint64_t id, const std::string& error,
                                                             const ucx_payload& payload) {
  if (id & wireup_pong_bit) return std::make_pair(id & ~wireup_pong_bit, error);
  if (!error.empty()) {
    log_line("ucx", "a peer's wireup ping failed: " + error);
    return std::nullopt;
  }
  if (payload.size == 0 || payload.size > wireup_address_max) {
    log_line("ucx", "a wireup ping of " + std::to_string(payload.size) + " bytes refused: not a worker address");
    return std::nullopt;
  }
  const std::string back(payload.view());
  t.send(back, id | wireup_pong_bit, std::make_shared<const std::string>("pong"),
         ucx_transport::clock::now() + std::chrono::milliseconds(t.config().timeout_ms), [](const std::string& e) {
           if (!e.empty()) log_line("ucx", "a wireup pong failed: " + e);
         });
  return std::nullopt;
}

}  // namespace dls::runtime
