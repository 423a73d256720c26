#pragma once
// The UCX data plane of one process: one UCP context and worker, progressed by a thread of
// its own so that no CAF scheduler thread ever waits on the network. Peers are named by
// their worker address (exchanged over CAF through the head); a buffer goes to a peer under
// a transfer id, and the receiver asks for that id. Small buffers go eagerly (from 128 KiB
// up the receiver keeps them where UCX assembled them), large ones by rendezvous into
// registered receive buffers; every part is sealed (AES-256-GCM under the cluster's
// data-plane key: runtime/ucx_seal.hpp) or, with ucx.encrypt off, checksummed, and every
// transfer has a deadline. A transfer to this process's own address is a hand-over: the
// receiver gets the sender's buffer, nothing is copied.
#include "runtime/cluster_config.hpp"
#include "runtime/ucx_buffers.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace dls::runtime {

/// UCX could not start as configured; the message names the transport or step that failed.
class ucx_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Whether endpoints over `tls` (a UCX_TLS list) ask UCX for peer-failure handling. UCX 1.13
/// skips shared-memory transports for such endpoints, so with any of them in the list the
/// endpoints run without it and a dead peer shows as a missed deadline instead.
bool ucx_handles_peer_errors(const std::string& tls);

class ucx_transport {
 public:
  using clock = std::chrono::steady_clock;
  /// Called on the progress thread with "" when the buffer may be released, or the reason.
  using send_done = std::function<void(const std::string& error)>;
  /// Called on the progress thread with "" and the checked bytes, or the reason.
  using receive_done = std::function<void(const std::string& error, ucx_payload payload)>;

  /// Called on the progress thread for a transfer that nobody asks for by id.
  using arrival_handler = std::function<void(uint64_t id, const std::string& error, ucx_payload payload)>;
  /// Transfer ids with this bit set are not awaited: they go to the handler of `on_unasked`
  /// as they land (a peer-kept snapshot). Every other id waits for `receive`.
  static constexpr uint64_t unasked_bit = uint64_t{1} << 63;

  /// Starts UCX with `cfg.tls`; throws ucx_error naming a transport this host lacks. With
  /// `cfg.encrypt`, `seal_key` is the cluster's data-plane key (ucx_seal_key_bytes bytes, the
  /// same at every peer): every part this transport sends is sealed with it, and every part it
  /// receives must open with it. Without, the key is ignored and parts carry checksums only.
  ucx_transport(const ucx_config& cfg, std::string seal_key);
  ~ucx_transport();
  ucx_transport(const ucx_transport&) = delete;
  ucx_transport& operator=(const ucx_transport&) = delete;

  /// This worker's address, for peers' `send`.
  const std::string& address() const;
  const ucx_config& config() const;

  /// Sends `bytes` to the worker at `peer_address` as transfer `id`. The buffer is kept alive
  /// until `done` runs. Callbacks never block; they run on the progress thread.
  void send(const std::string& peer_address, uint64_t id, std::shared_ptr<const std::string> bytes,
            clock::time_point deadline, send_done done);
  /// Waits for transfer `id` (which may already have arrived) until `deadline`.
  void receive(uint64_t id, clock::time_point deadline, receive_done done);

  /// Hands every transfer whose id has `unasked_bit` to `handler`. Set it before the
  /// process's address is given to peers; until then such transfers wait like any other.
  void on_unasked(arrival_handler handler);

  /// Blocking forms for threads that may wait (tests, benchmarks, a worker's own thread);
  /// the deadline is now + the configured timeout.
  std::string send_wait(const std::string& peer_address, uint64_t id, std::shared_ptr<const std::string> bytes);
  struct received {
    std::string error;
    ucx_payload payload;
  };
  received receive_wait(uint64_t id);

  /// Received eager buffers that UCX lent (kept where it assembled them, not copied) and that
  /// their consumers still hold. A transport that stops while some are held waits for them up to
  /// 2 s; the worker of those still held then goes when the last of them is dropped.
  std::size_t lent_buffers_held() const;

  /// The transport lanes UCX chose towards a peer (ucp_ep_print_info), for logs and benchmarks.
  std::string describe_lanes(const std::string& peer_address);

  struct impl;  // public only so UCX's C callbacks in the .cpp can name it

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace dls::runtime
