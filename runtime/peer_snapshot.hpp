#pragma once
// Recovery snapshots kept by a peer node instead of the head (`ucx.snapshots: peer`): a TP
// group sends each request's canvas at a refresh boundary over UCX to its node's keeper, and
// the head only learns where it is. The frame names the request, so the keeper needs no
// message beside it; the store keeps the newest canvas per request within a bound.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dls::runtime {

struct peer_snapshot {
  uint64_t request_id = 0;
  uint32_t epoch = 0;  // the request's placement when it was taken
  int32_t steps = 0;
  int32_t tokens = 0;
  std::vector<char> canvas;
};

/// The bytes that travel: a fixed little header, then the canvas as the engine wrote it.
std::string encode_peer_snapshot(const peer_snapshot& s);
/// Throws std::invalid_argument naming what is wrong (short, bad magic, negative counts).
peer_snapshot decode_peer_snapshot(std::string_view bytes);

/// SHA-256 of a snapshot's frame (32 bytes). The group that takes a snapshot sends it to the
/// request's actor over the TLS control plane, and the actor checks what a keeper hands back
/// against it: the data plane is not authenticated (docs/runtime.md, "Security"), so a frame
/// replaced on the way or filed by another UCX peer is refused instead of resumed from.
std::string peer_snapshot_digest(const peer_snapshot& s);

/// The keeper's side: the newest snapshot of each request, at most `capacity` requests (the
/// oldest kept is dropped first). A request's actor forgets its snapshot when it ends; the
/// bound covers ends that never arrive (a head that died).
class snapshot_store {
 public:
  explicit snapshot_store(std::size_t capacity) : capacity_(capacity) {}
  /// Keeps `s` unless the store holds a later one of that request (higher epoch, or the same
  /// epoch and more steps): UCX may deliver two snapshots of one request out of order.
  void put(peer_snapshot s);
  const peer_snapshot* find(uint64_t request_id) const;
  void forget(uint64_t request_id);
  std::size_t size() const { return by_id_.size(); }
  std::size_t bytes() const { return bytes_; }
  uint64_t evicted() const { return evicted_; }

 private:
  std::size_t capacity_;
  struct kept {
    peer_snapshot snapshot;
    uint64_t seq;  // when it was first kept: matches its entry in order_
  };
  std::map<uint64_t, kept> by_id_;
  std::deque<std::pair<uint64_t, uint64_t>> order_;  // (id, seq), first kept first; stale pairs are skipped
  uint64_t next_seq_ = 0;
  std::size_t bytes_ = 0;
  uint64_t evicted_ = 0;
};

}  // namespace dls::runtime
