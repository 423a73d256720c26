#include "runtime/peer_snapshot.hpp"

#include <openssl/evp.h>

#include <cstring>
#include <stdexcept>

namespace dls::runtime {

namespace {

constexpr uint32_t magic = 0x50534e31;  // "PSN1"
struct wire_header {
  uint32_t magic;
  uint32_t epoch;
  uint64_t request_id;
  int32_t steps;
  int32_t tokens;
};
static_assert(sizeof(wire_header) == 24, "the header is sent as it lies in memory");

}  // namespace

std::string encode_peer_snapshot(const peer_snapshot& s) {
  wire_header h{magic, s.epoch, s.request_id, s.steps, s.tokens};
  std::string out(sizeof h + s.canvas.size(), '\0');
  std::memcpy(out.data(), &h, sizeof h);
  if (!s.canvas.empty()) std::memcpy(out.data() + sizeof h, s.canvas.data(), s.canvas.size());
  return out;
}

std::string peer_snapshot_digest(const peer_snapshot& s) {
  const auto frame = encode_peer_snapshot(s);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(frame.data(), frame.size(), md, &n, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("peer snapshot: SHA-256 failed");
  return std::string(reinterpret_cast<const char*>(md), n);
}

peer_snapshot decode_peer_snapshot(std::string_view bytes) {
  wire_header h;
  if (bytes.size() < sizeof h)
    throw std::invalid_argument("a peer snapshot of " + std::to_string(bytes.size()) + " bytes is shorter than its header");
  std::memcpy(&h, bytes.data(), sizeof h);
  if (h.magic != magic) throw std::invalid_argument("not a peer snapshot (bad magic)");
  if (h.steps < 0 || h.tokens < 0) throw std::invalid_argument("a peer snapshot with negative steps or tokens");
  if (bytes.size() == sizeof h) throw std::invalid_argument("a peer snapshot without a canvas");
  peer_snapshot s;
  s.request_id = h.request_id;
  s.epoch = h.epoch;
  s.steps = h.steps;
  s.tokens = h.tokens;
  s.canvas.assign(bytes.begin() + sizeof h, bytes.end());
  return s;
}

void snapshot_store::put(peer_snapshot s) {
  if (capacity_ == 0) return;
  auto it = by_id_.find(s.request_id);
  if (it != by_id_.end()) {
    const auto& old = it->second.snapshot;
    if (old.epoch > s.epoch || (old.epoch == s.epoch && old.steps > s.steps)) return;
    bytes_ -= old.canvas.size();
    bytes_ += s.canvas.size();
    it->second.snapshot = std::move(s);
    return;
  }
  while (by_id_.size() >= capacity_ && !order_.empty()) {
    auto [victim, seq] = order_.front();
    order_.pop_front();
    if (auto v = by_id_.find(victim); v != by_id_.end() && v->second.seq == seq) {
      bytes_ -= v->second.snapshot.canvas.size();
      by_id_.erase(v);
      ++evicted_;
    }
  }
  const auto id = s.request_id;
  const auto seq = next_seq_++;
  bytes_ += s.canvas.size();
  by_id_.emplace(id, kept{std::move(s), seq});
  order_.emplace_back(id, seq);
}

const peer_snapshot* snapshot_store::find(uint64_t request_id) const {
  auto it = by_id_.find(request_id);
  return it == by_id_.end() ? nullptr : &it->second.snapshot;
}

void snapshot_store::forget(uint64_t request_id) {
  auto it = by_id_.find(request_id);
  if (it == by_id_.end()) return;
  bytes_ -= it->second.snapshot.canvas.size();
  by_id_.erase(it);
  // Its pair stays in order_ until it reaches the front; compacting keeps that queue bounded
  // when many requests end while few are kept.
  if (order_.size() > 2 * capacity_ + 16) {
    std::deque<std::pair<uint64_t, uint64_t>> live;
    for (const auto& [id, seq] : order_)
      if (auto k = by_id_.find(id); k != by_id_.end() && k->second.seq == seq) live.emplace_back(id, seq);
    order_.swap(live);
  }
}

}  // namespace dls::runtime
