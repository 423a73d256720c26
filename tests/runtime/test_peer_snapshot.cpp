#define BOOST_TEST_MODULE peer_snapshot
// Peer-kept recovery snapshots without a cluster: the frame a group sends to its keeper, what
// a damaged one is refused with, and the keeper's store (newest per request, bounded, forgotten
// at the end). The cluster path is in test_runtime_recovery.
#include "runtime/peer_snapshot.hpp"

#include <boost/test/unit_test.hpp>

#include <stdexcept>
#include <string>

namespace rt = dls::runtime;

namespace {

rt::peer_snapshot snap(uint64_t id, uint32_t epoch, int32_t steps, const std::string& canvas = "canvas") {
  return {id, epoch, steps, steps * 2, std::vector<char>(canvas.begin(), canvas.end())};
}

std::string refusal(const std::string& bytes) {
  try {
    rt::decode_peer_snapshot(bytes);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_snapshot_survives_its_frame_exactly) {
  const auto s = snap(0xfeedbeef12345678ull, 7, 24, std::string("\0\1\2 canvas bytes", 17));
  const auto bytes = rt::encode_peer_snapshot(s);
  BOOST_TEST(bytes.size() == 24u + s.canvas.size());
  const auto back = rt::decode_peer_snapshot(bytes);
  BOOST_TEST(back.request_id == s.request_id);
  BOOST_TEST(back.epoch == 7u);
  BOOST_TEST(back.steps == 24);
  BOOST_TEST(back.tokens == 48);
  BOOST_TEST((back.canvas == s.canvas));
}

// The digest a request checks a kept snapshot against: SHA-256 of the frame, so it names the
// request, the placement, the counts and every canvas byte.
BOOST_AUTO_TEST_CASE(a_snapshot_digest_changes_with_every_field) {
  const auto s = snap(42, 3, 10, "a canvas of bytes");
  const auto d = rt::peer_snapshot_digest(s);
  BOOST_TEST(d.size() == 32u);
  BOOST_TEST(rt::peer_snapshot_digest(s) == d);
  // Python's hashlib over the same frame (little-endian header: magic, epoch, id, steps, tokens).
  std::string hex;
  for (unsigned char c : d) {
    static const char* digits = "0123456789abcdef";
    hex += digits[c >> 4];
    hex += digits[c & 15];
  }
  BOOST_TEST(hex == "8c3cd9696dfdf3c124f2b9aa2a9e6114cc0854734a2a0a7c25749368e98fd6fc");
  BOOST_TEST(rt::peer_snapshot_digest(snap(42, 3, 10, "a canvas of bytez")) != d);
  BOOST_TEST(rt::peer_snapshot_digest(snap(43, 3, 10, "a canvas of bytes")) != d);
  BOOST_TEST(rt::peer_snapshot_digest(snap(42, 4, 10, "a canvas of bytes")) != d);
  BOOST_TEST(rt::peer_snapshot_digest(snap(42, 3, 11, "a canvas of bytes")) != d);
  auto more_tokens = s;
  more_tokens.tokens += 1;
  BOOST_TEST(rt::peer_snapshot_digest(more_tokens) != d);
}

BOOST_AUTO_TEST_CASE(damaged_frames_are_refused_with_a_reason) {
  const auto good = rt::encode_peer_snapshot(snap(1, 1, 8));
  BOOST_TEST(refusal(good.substr(0, 23)).find("shorter than its header") != std::string::npos);
  BOOST_TEST(refusal(good.substr(0, 24)).find("without a canvas") != std::string::npos);
  auto foreign = good;
  foreign[0] ^= 1;
  BOOST_TEST(refusal(foreign).find("bad magic") != std::string::npos);
  auto negative = rt::encode_peer_snapshot(snap(1, 1, -3));
  BOOST_TEST(refusal(negative).find("negative") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_store_keeps_the_newest_snapshot_of_each_request) {
  rt::snapshot_store store(8);
  store.put(snap(5, 2, 16, "b"));
  store.put(snap(5, 2, 8, "a"));   // older (fewer steps, same placement): arrived late, ignored
  store.put(snap(5, 1, 24, "x"));  // an older placement: ignored
  BOOST_REQUIRE(store.find(5));
  BOOST_TEST(store.find(5)->steps == 16);
  store.put(snap(5, 3, 8, "cc"));  // a newer placement counts even with fewer steps
  BOOST_TEST(store.find(5)->epoch == 3u);
  BOOST_TEST(store.size() == 1u);
  BOOST_TEST(store.bytes() == 2u);
  store.forget(5);
  BOOST_TEST(!store.find(5));
  BOOST_TEST(store.bytes() == 0u);
  store.forget(5);  // twice is harmless
}

BOOST_AUTO_TEST_CASE(the_store_drops_the_oldest_kept_request_beyond_its_bound) {
  rt::snapshot_store store(3);
  for (uint64_t id = 1; id <= 3; ++id) store.put(snap(id, 1, 8));
  store.put(snap(1, 1, 16));  // an update does not make request 1 younger
  store.put(snap(4, 1, 8));
  BOOST_TEST(!store.find(1));
  BOOST_TEST(store.find(2));
  BOOST_TEST(store.find(4));
  BOOST_TEST(store.evicted() == 1u);
  // A request forgotten and kept again is as young as its new entry, not its first one.
  store.forget(2);
  store.put(snap(2, 2, 8));
  store.put(snap(5, 1, 8));
  BOOST_TEST(store.find(2));
  BOOST_TEST(!store.find(3));
  BOOST_TEST(store.size() == 3u);
}

BOOST_AUTO_TEST_CASE(requests_kept_and_forgotten_in_turn_leave_nothing_behind) {
  rt::snapshot_store store(4);
  for (uint64_t id = 1; id <= 10000; ++id) {
    store.put(snap(id, 1, 8));
    store.forget(id);
  }
  BOOST_TEST(store.size() == 0u);
  store.put(snap(1, 1, 8));
  BOOST_TEST(store.size() == 1u);
  BOOST_TEST(store.evicted() == 0u);
}
