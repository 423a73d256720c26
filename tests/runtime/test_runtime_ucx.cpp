#define BOOST_TEST_MODULE runtime_ucx
// The UCX data plane: two processes on 127.0.0.1 move a real mid-block KV cache and the
// destination decodes on token-identically (tcp and shared memory); a hand-over inside one
// process copies nothing; an eager buffer is kept where UCX assembled it, even past its
// transport; a buffer sent in parts arrives whole; a killed source ends the
// receiver's wait cleanly; corrupt, truncated, misplaced and unknown frames and parts are
// refused with a reason; a missing transport is named.
#include "ucx_test_support.hpp"

#include "gpu/cpu_backend.hpp"
#include "gpu/engine.hpp"
#include "gpu/model.hpp"
#include "runtime/cluster_config.hpp"
#include "runtime/process.hpp"
#include "runtime/ucx_assembly.hpp"
#include "runtime/ucx_buffers.hpp"
#include "runtime/ucx_frame.hpp"
#include "runtime/ucx_seal.hpp"
#include "runtime/ucx_transport.hpp"

#include <boost/test/unit_test.hpp>

#include <signal.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <vector>
#include <thread>
#include <fstream>
#include <sstream>

namespace rt = dls::runtime;
namespace gpu = dls::gpu;
using dls::test::to_hex;

namespace {

const std::string model_dir = std::string(DLS_SOURCE_DIR) + "/models/tiny-llada";

rt::ucx_config local(const std::string& tls, int timeout_ms = 10000) {
  rt::ucx_config c;
  c.tls = tls;
  c.net_devices = "lo";
  c.timeout_ms = timeout_ms;
  return c;
}

std::string log_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("dls-ucx-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / (name + ".log")).string();
}

void move_kv_and_continue(const std::string& tls) {
  rt::ucx_transport t(local(tls), dls::test::test_seal_key());
  auto child = rt::spawn_background({DLS_UCX_PEER, "move-kv", tls, to_hex(t.address()), model_dir},
                                    log_path("move-kv-" + tls));
  const std::string line = rt::wait_ready(child, 120000);
  BOOST_REQUIRE_MESSAGE(line.rfind("steps ", 0) == 0, "the source failed: " + line);
  BOOST_REQUIRE(rt::wait_exit(child.pid, 30000));
  std::istringstream in(line);
  std::string word;
  int steps = 0;
  std::size_t kv_bytes = 0;
  in >> word >> steps >> word >> kv_bytes >> word;
  std::vector<int32_t> unmoved;
  for (int32_t id; in >> id;) unmoved.push_back(id);

  auto canvas = t.receive_wait(1);
  auto kv = t.receive_wait(2);
  BOOST_REQUIRE_MESSAGE(canvas.error.empty(), canvas.error);
  BOOST_REQUIRE_MESSAGE(kv.error.empty(), kv.error);
  BOOST_TEST(kv.payload.size == kv_bytes);
  auto model = gpu::load_model(model_dir);
  gpu::engine e(gpu::make_cpu_backend(model));
  auto s = e.admit(gpu::canvas::from_bytes(std::string(canvas.payload.view())));
  BOOST_REQUIRE(!s.c.at_refresh_boundary());  // mid-block: without the cache it could not go on
  s.cache->import_bytes(kv.payload.view());
  while (!s.c.finished) e.step({&s});
  BOOST_TEST((s.c.ids == unmoved));
  BOOST_TEST(s.c.steps == steps);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_mid_block_kv_cache_moves_over_tcp_and_decoding_continues_identically) {
  move_kv_and_continue("tcp");
}

BOOST_AUTO_TEST_CASE(a_mid_block_kv_cache_moves_over_shared_memory_and_decoding_continues_identically) {
  move_kv_and_continue("shm,cma,tcp");
}

BOOST_AUTO_TEST_CASE(a_hand_over_inside_one_process_copies_nothing) {
  rt::ucx_transport t(local("tcp"), dls::test::test_seal_key());
  auto buf = std::make_shared<const std::string>(1 << 20, 'k');
  BOOST_TEST(t.send_wait(t.address(), 9, buf).empty());
  auto got = t.receive_wait(9);
  BOOST_TEST(got.error.empty());
  BOOST_TEST(static_cast<const void*>(got.payload.data) == static_cast<const void*>(buf->data()));
  BOOST_TEST(got.payload.size == buf->size());
}

BOOST_AUTO_TEST_CASE(a_source_killed_during_a_transfer_ends_the_wait_cleanly) {
  const int timeout_ms = 3000;
  rt::ucx_transport t(local("tcp", timeout_ms), dls::test::test_seal_key());
  // 256 MB over loopback tcp takes a good fraction of a second here, the kill a millisecond.
  auto child = rt::spawn_background({DLS_UCX_PEER, "send-big", "tcp", to_hex(t.address()), std::to_string(256u << 20)},
                                    log_path("send-big"));
  auto hello = t.receive_wait(2);
  BOOST_REQUIRE_MESSAGE(hello.error.empty(), hello.error);
  BOOST_REQUIRE(t.send_wait(std::string(hello.payload.view()), 5, std::make_shared<const std::string>("go")).empty());
  BOOST_REQUIRE(rt::wait_ready(child, 60000) == "sending");
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(child.pid, SIGKILL);
  BOOST_REQUIRE(rt::wait_exit(child.pid, 10000));
  auto got = t.receive_wait(3);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST_MESSAGE("receiver: " << got.error << " after " << waited << " s");
  BOOST_TEST(!got.error.empty());
  BOOST_TEST(got.payload.size == 0u);
  BOOST_TEST(waited < timeout_ms / 1000.0 + 2.0);  // its deadline plus the progress thread's tick, never a hang
  // The transport still works after the failure.
  BOOST_TEST(t.send_wait(t.address(), 4, std::make_shared<const std::string>("after")).empty());
  BOOST_TEST(t.receive_wait(4).payload.view() == "after");
}

// A sender that stops its transport as soon as its sends are reported done (a node that hands
// its last snapshots over and exits) still delivers them: teardown flushes its endpoints. The
// 1 MiB buffers go eagerly, and an eager send is done before it has arrived.
BOOST_AUTO_TEST_CASE(a_transport_stopped_right_after_its_sends_still_delivers_them) {
  rt::ucx_transport t(local("tcp", 10000), dls::test::test_seal_key());
  auto child = rt::spawn_background({DLS_UCX_PEER, "send-and-stop", "tcp", to_hex(t.address()), std::to_string(1u << 20)},
                                    log_path("send-and-stop"));
  BOOST_REQUIRE(rt::wait_ready(child, 60000) == "sent");
  BOOST_REQUIRE(rt::wait_exit(child.pid, 30000));
  for (uint64_t id = 10; id < 26; ++id) {
    auto got = t.receive_wait(id);
    BOOST_TEST_REQUIRE(got.error.empty(), "transfer " << id << ": " << got.error);
    BOOST_TEST(got.payload.size == (1u << 20));
    BOOST_TEST(got.payload.data[0] == static_cast<char>('a' + id % 26));
  }
}

BOOST_AUTO_TEST_CASE(nothing_arriving_misses_the_deadline_with_a_reason) {
  rt::ucx_transport t(local("tcp", 200), dls::test::test_seal_key());
  auto got = t.receive_wait(77);
  BOOST_TEST(got.error.find("transfer 77") != std::string::npos);
  BOOST_TEST(got.error.find("deadline") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(corrupt_truncated_and_foreign_frames_are_refused_with_a_reason) {
  const std::string payload(4096, 'p');
  const auto h = rt::make_frame_header(5, payload);
  BOOST_TEST(rt::check_frame_header(&h, sizeof h, payload.size()).empty());
  BOOST_TEST(rt::check_frame_payload(h, payload).empty());
  BOOST_TEST(rt::check_frame_header(&h, sizeof h, 100).find("truncated, 100 of 4096 bytes") != std::string::npos);
  BOOST_TEST(rt::check_frame_header(&h, 8, payload.size()).find("header of 8 bytes") != std::string::npos);
  auto foreign = h;
  foreign.magic = 0;
  BOOST_TEST(rt::check_frame_header(&foreign, sizeof foreign, payload.size()).find("bad magic") != std::string::npos);
  std::string flipped = payload;
  flipped[1234] ^= 1;
  BOOST_TEST(rt::check_frame_payload(h, flipped).find("checksum mismatch") != std::string::npos);
  // A KV cache whose frame was fine but whose bytes do not describe a cache is refused too.
  auto model = gpu::load_model(model_dir);
  auto cache = gpu::make_cpu_backend(model)->make_cache();
  BOOST_CHECK_THROW(cache->import_bytes(payload), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_transport_this_host_lacks_is_named) {
  try {
    rt::ucx_transport t(local("tcp,cuda_ipc"), dls::test::test_seal_key());
    BOOST_FAIL("UCX started without cuda_ipc");
  } catch (const rt::ucx_error& e) {
    BOOST_TEST(std::string(e.what()).find("'cuda_ipc'") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(the_ucx_section_of_the_cluster_file_is_strict) {
  const std::string base = "name: t\nauth: {token: ucx-test-token}\nhead: {host: 127.0.0.1, port: 0}\nnodes: [{name: n0, devices: {kind: cpu, count: 1}, groups: [1]}]\n"
                           "model: {path: /tmp}\n";
  auto cfg = rt::parse_cluster_config(base + "ucx: {tls: 'shm,cma,tcp', net_devices: lo, rndv_threshold_bytes: 4096, timeout_ms: 500}\n",
                                      "t.yaml", "/tmp");
  BOOST_TEST(cfg.ucx.tls == std::string("shm,cma,tcp"));
  BOOST_TEST(cfg.ucx.rndv_threshold_bytes == 4096u);
  BOOST_TEST(cfg.ucx.timeout_ms == 500);
  const auto plain = rt::parse_cluster_config(base, "t.yaml", "/tmp");
  BOOST_TEST(plain.ucx.tls == std::string("tcp"));
  BOOST_TEST(plain.ucx.kv_move == std::string("auto"));
  BOOST_TEST(rt::parse_cluster_config(base + "ucx: {kv_move: rebuild}\n", "t.yaml", "/tmp").ucx.kv_move == "rebuild");
  BOOST_TEST(plain.ucx.snapshots == std::string("head"));
  BOOST_TEST(rt::parse_cluster_config(base + "ucx: {snapshots: peer}\n", "t.yaml", "/tmp").ucx.snapshots == "peer");
  BOOST_TEST(plain.ucx.tcp_segment_bytes == 512u << 10);
  BOOST_TEST(plain.ucx.encrypt);
  BOOST_TEST(!rt::parse_cluster_config(base + "ucx: {encrypt: false}\n", "t.yaml", "/tmp").ucx.encrypt);
  BOOST_TEST(rt::parse_cluster_config(base + "ucx: {tcp_segment_bytes: 0}\n", "t.yaml", "/tmp").ucx.tcp_segment_bytes == 0u);
  BOOST_TEST(rt::parse_cluster_config(base + "ucx: {tcp_segment_bytes: 1048576}\n", "t.yaml", "/tmp").ucx.tcp_segment_bytes ==
             1u << 20);
  auto refused = [&](const std::string& ucx, const std::string& why) {
    try {
      rt::parse_cluster_config(base + ucx, "t.yaml", "/tmp");
      BOOST_ERROR("accepted: " + ucx);
    } catch (const rt::config_error& e) {
      BOOST_TEST_MESSAGE(e.what());
      BOOST_TEST(std::string(e.what()).find(why) != std::string::npos, e.what());
    }
  };
  refused("ucx: {tls: 'tcp,warp'}\n", "unknown UCX transport 'warp'");
  refused("ucx: {tls: 'tcp,'}\n", "at least one");
  refused("ucx: {tsl: tcp}\n", "unknown key 'tsl'");
  refused("ucx: {timeout_ms: 0}\n", "ucx.timeout_ms");
  refused("ucx: {snapshots: disk}\n", "ucx.snapshots");
  refused("ucx: {kv_move: sometimes}\n", "ucx.kv_move");
  refused("ucx: {encrypt: maybe}\n", "ucx.encrypt");
  refused("ucx: {tcp_segment_bytes: 100}\n", "ucx.tcp_segment_bytes must be 0 (UCX's own) or at least 4096");
  refused("ucx: {tcp_segment_bytes: 134217728}\n", "ucx.tcp_segment_bytes");
  refused("ucx: {tcp_segment_bytes: big}\n", "ucx.tcp_segment_bytes");
}

// ucx.tcp_segment_bytes reaches UCX's tcp transport: an endpoint's short eager sends go up to
// one segment less UCX's header, which with UCX's own sizes (0) stop at its 8 KiB segment.
BOOST_AUTO_TEST_CASE(the_tcp_segment_reaches_ucx) {
  auto short_eager_limit = [](std::size_t segment) {
    auto cfg = local("tcp");
    cfg.tcp_segment_bytes = segment;
    rt::ucx_transport a(cfg, dls::test::test_seal_key()), b(cfg, dls::test::test_seal_key());
    const std::string lanes = a.describe_lanes(b.address());
    const auto at = lanes.find("<egr/short>..");
    BOOST_REQUIRE_MESSAGE(at != std::string::npos, lanes);
    return std::stoul(lanes.substr(at + 13));
  };
  const auto big = short_eager_limit(512u << 10), ucx_own = short_eager_limit(0);
  BOOST_TEST(big > (500u << 10));
  BOOST_TEST(big < (512u << 10));
  BOOST_TEST(ucx_own < (16u << 10));
}

// The transport's threads block every signal, so a process's handlers (the program's stop
// signal, a test framework's SIGCHLD) never run on them in the middle of UCX or a hash.
BOOST_AUTO_TEST_CASE(the_transport_threads_take_no_signals) {
  rt::ucx_transport t(local("tcp"), dls::test::test_seal_key());
  auto blocked_masks = [] {
    std::vector<unsigned long long> masks;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      std::ifstream comm(task.path() / "comm");
      std::string name;
      std::getline(comm, name);
      if (name != "ucx-progress" && name != "ucx-hash") continue;
      std::ifstream status(task.path() / "status");
      for (std::string line; std::getline(status, line);)
        if (line.rfind("SigBlk:", 0) == 0) masks.push_back(std::stoull(line.substr(7), nullptr, 16));
    }
    return masks;
  };
  // Each thread names itself as it starts: wait (bounded) until both have.
  auto masks = blocked_masks();
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       masks.size() < 2 && std::chrono::steady_clock::now() < until; masks = blocked_masks())
    std::this_thread::yield();
  BOOST_REQUIRE_EQUAL(masks.size(), 2u);
  for (auto m : masks)
    for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGALRM}) BOOST_TEST((m >> (sig - 1) & 1ull) == 1ull, "signal " << sig);
}

namespace {

// Two transports of this process: a real UCX transfer between two workers (not a hand-over).
void parts_arrive_whole(const std::string& tls) {
  auto cfg = local(tls);
  cfg.part_bytes = 256 << 10;
  rt::ucx_transport a(cfg, dls::test::test_seal_key()), b(cfg, dls::test::test_seal_key());
  // Not a multiple of the part size, and every part's bytes differ, so a part landing at the
  // wrong offset shows.
  std::string bytes((3u << 20) + 7, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  auto buf = std::make_shared<const std::string>(bytes);
  BOOST_TEST(rt::parts_for(buf->size(), cfg.part_bytes) == 13u);
  auto got = std::async(std::launch::async, [&] { return b.receive_wait(11); });
  BOOST_TEST(a.send_wait(b.address(), 11, buf).empty());
  auto r = got.get();
  BOOST_REQUIRE_MESSAGE(r.error.empty(), r.error);
  BOOST_TEST((r.payload.view() == bytes));
  // A small one after it still goes whole.
  BOOST_TEST(a.send_wait(b.address(), 12, std::make_shared<const std::string>("small")).empty());
  BOOST_TEST(b.receive_wait(12).payload.view() == "small");
}

}  // namespace

namespace {

std::string patterned(std::size_t n, unsigned salt) {
  std::string bytes(n, '\0');
  for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<char>(((i + salt) * 2654435761u) >> 13);
  return bytes;
}

// Waits until `t` holds no lent buffer (the progress thread gives them back after their drop),
// for at most 10 s.
bool all_lent_buffers_back(const rt::ucx_transport& t) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (t.lent_buffers_held() > 0) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace

// A 512 KiB buffer goes eagerly (under the rendezvous threshold), in shared-memory fragments
// that UCX assembles; the receiver keeps it there instead of copying it, checked all the same,
// and gives it back when the payload is dropped.
BOOST_AUTO_TEST_CASE(an_eager_buffer_is_kept_where_ucx_assembled_it_until_its_payload_is_dropped) {
  auto cfg = local("shm,cma,tcp");
  rt::ucx_transport a(cfg, dls::test::test_seal_key()), b(cfg, dls::test::test_seal_key());
  const auto bytes = patterned(512u << 10, 1);
  auto got = std::async(std::launch::async, [&] { return b.receive_wait(31); });
  BOOST_TEST(a.send_wait(b.address(), 31, std::make_shared<const std::string>(bytes)).empty());
  auto r = got.get();
  BOOST_REQUIRE_MESSAGE(r.error.empty(), r.error);
  BOOST_TEST((r.payload.view() == bytes));
  BOOST_TEST(b.lent_buffers_held() == 1u);
  auto copy = r.payload;  // a second holder keeps it lent
  r.payload = {};
  BOOST_TEST(b.lent_buffers_held() == 1u);
  copy = {};
  BOOST_TEST(all_lent_buffers_back(b));
  // Small buffers are copied into the pool: nothing stays lent for them.
  auto small = std::async(std::launch::async, [&] { return b.receive_wait(32); });
  BOOST_TEST(a.send_wait(b.address(), 32, std::make_shared<const std::string>(patterned(16u << 10, 2))).empty());
  auto s = small.get();
  BOOST_REQUIRE_MESSAGE(s.error.empty(), s.error);
  BOOST_TEST(b.lent_buffers_held() == 0u);
}

// A consumer that still holds a lent buffer when its transport stops can go on reading it, and
// drop it afterwards: the worker that lent it stays alive for it (ASan checks the reads, and that
// nothing is lost).
BOOST_AUTO_TEST_CASE(a_lent_buffer_outlives_the_transport_that_received_it) {
  auto cfg = local("shm,cma,tcp");
  rt::ucx_transport a(cfg, dls::test::test_seal_key());
  const auto bytes = patterned(256u << 10, 3);
  rt::ucx_payload kept;
  {
    rt::ucx_transport b(cfg, dls::test::test_seal_key());
    auto got = std::async(std::launch::async, [&] { return b.receive_wait(41); });
    BOOST_TEST(a.send_wait(b.address(), 41, std::make_shared<const std::string>(bytes)).empty());
    auto r = got.get();
    BOOST_REQUIRE_MESSAGE(r.error.empty(), r.error);
    BOOST_REQUIRE(b.lent_buffers_held() == 1u);
    kept = r.payload;
  }
  BOOST_TEST((kept.view() == bytes));
  kept = {};
}

BOOST_AUTO_TEST_CASE(a_buffer_sent_in_parts_arrives_whole_over_tcp) { parts_arrive_whole("tcp"); }

BOOST_AUTO_TEST_CASE(a_buffer_sent_in_parts_arrives_whole_over_shared_memory) { parts_arrive_whole("shm,cma,tcp"); }

BOOST_AUTO_TEST_CASE(parts_that_do_not_fit_their_transfer_are_refused_with_a_reason) {
  std::string whole(1000, 'w');
  const auto p1 = rt::make_part_header(8, whole, 300, 1, 4);
  BOOST_TEST(p1.offset == 300u);
  BOOST_TEST(p1.bytes == 300u);
  BOOST_TEST(rt::make_part_header(8, whole, 300, 3, 4).bytes == 100u);  // the last part is the rest
  BOOST_TEST(rt::check_frame_header(&p1, sizeof p1, 300).empty());
  BOOST_TEST(rt::check_frame_payload(p1, std::string_view(whole).substr(300, 300)).empty());
  std::string flipped = whole;
  flipped[450] ^= 1;
  BOOST_TEST(rt::check_frame_payload(p1, std::string_view(flipped).substr(300, 300)).find("checksum mismatch over 300 bytes of part 1") !=
             std::string::npos);
  auto beyond = p1;
  beyond.offset = 900;  // 900 + 300 > 1000
  BOOST_TEST(rt::check_frame_header(&beyond, sizeof beyond, 300).find("does not fit a transfer of 1000") != std::string::npos);
  auto wrapping = p1;
  wrapping.offset = ~uint64_t{0} - 10;  // offset + bytes wraps 64 bits
  BOOST_TEST(rt::check_frame_header(&wrapping, sizeof wrapping, 300).find("does not fit") != std::string::npos);
  auto no_part = p1;
  no_part.part = 4;
  BOOST_TEST(rt::check_frame_header(&no_part, sizeof no_part, 300).find("part 4 of 4 is not a part") != std::string::npos);
  auto old = p1;
  old.version = 1;
  BOOST_TEST(rt::check_frame_header(&old, sizeof old, 300).find("frame version 1") != std::string::npos);

  rt::ucx_assembly in(p1);
  BOOST_TEST(in.admit(p1).empty());
  BOOST_TEST(in.admit(p1).find("part 1 arrived twice") != std::string::npos);
  auto other = rt::make_part_header(8, std::string(2000, 'x'), 300, 2, 7);
  BOOST_TEST(in.admit(other).find("claims 7 parts and 2000 bytes") != std::string::npos);
  for (uint32_t k : {0u, 2u, 3u}) BOOST_TEST(in.admit(rt::make_part_header(8, whole, 300, k, 4)).empty());
  BOOST_TEST(in.arrived() == 4u);
  for (int k = 0; k < 3; ++k) in.part_checked();
  BOOST_TEST(!in.whole());
  in.part_checked();
  BOOST_TEST(in.whole());
}

// A part that fits its transfer may still overlap another or leave a gap: the buffer would then
// hold bytes written twice, or bytes of whatever the pool's buffer held before, and pass every
// part's checksum. The first part to arrive fixes the cut; every part must sit in its place.
BOOST_AUTO_TEST_CASE(parts_that_overlap_or_leave_a_gap_are_refused) {
  const std::string whole(1000, 'w');
  auto part = [&](uint32_t k) { return rt::make_part_header(9, whole, 300, k, 4); };
  auto refused = [](rt::ucx_assembly& in, const rt::ucx_frame_header& h) {
    BOOST_TEST(rt::check_frame_header(&h, sizeof h, static_cast<std::size_t>(h.bytes)).empty());  // it fits
    const auto why = in.admit(h);
    BOOST_TEST(why.find("is not in its place in 1000 bytes") != std::string::npos, why);
    BOOST_TEST(why.find('\n') == std::string::npos);
  };
  {
    rt::ucx_assembly in(part(0));
    BOOST_TEST(in.admit(part(0)).empty());
    auto over = part(1);
    over.offset = 0;  // on top of part 0, leaving 300..599 as the pool left it
    refused(in, over);
  }
  {
    rt::ucx_assembly in(part(2));
    BOOST_TEST(in.admit(part(2)).empty());
    auto shorter = part(1);
    shorter.bytes = 250;  // parts of one size, but the last
    refused(in, shorter);
    auto longer_last = part(3);
    longer_last.offset = 850;
    longer_last.bytes = 150;  // the rest, but not from where part 2 ends
    refused(in, longer_last);
  }
  {
    auto last = part(3);
    last.offset = 901;  // a last part first: its offset is no whole number of 3 parts
    last.bytes = 99;
    rt::ucx_assembly in(last);
    refused(in, last);
  }
  {
    auto five = rt::make_part_header(9, whole, 250, 0, 5);  // 4 parts of 250 make 1000: a fifth is empty
    rt::ucx_assembly in(five);
    const auto why = in.admit(five);
    BOOST_TEST(why.find("is not in its place") != std::string::npos, why);
  }
  {
    // The sender's own cut, its parts in any order, is whole.
    rt::ucx_assembly in(part(3));
    for (uint32_t k : {3u, 1u, 0u, 2u}) BOOST_TEST(in.admit(part(k)).empty());
    BOOST_TEST(in.arrived() == 4u);
  }
}

// A receive buffer of a size seen before is the one given back last (the likeliest to be in
// cache when the next transfer lands in it), and other sizes are not handed out for it.
BOOST_AUTO_TEST_CASE(the_receive_pool_hands_out_the_buffer_given_back_last) {
  ucp_config_t* cfg = nullptr;
  BOOST_REQUIRE(ucp_config_read(nullptr, nullptr, &cfg) == UCS_OK);
  BOOST_REQUIRE(ucp_config_modify(cfg, "TLS", "tcp") == UCS_OK);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_AM;
  params.mt_workers_shared = 1;
  ucp_context_h ctx = nullptr;
  const ucs_status_t status = ucp_init(&params, cfg, &ctx);
  ucp_config_release(cfg);
  BOOST_REQUIRE(status == UCS_OK);
  {
    auto pool = std::make_shared<rt::ucx_buffer_pool>(ctx, std::size_t{1} << 20);
    // Compared as addresses: Boost.Test would compare char pointers as strings.
    auto at = [](const rt::ucx_buffer_pool::buffer& b) { return reinterpret_cast<std::uintptr_t>(b.data); };
    auto a = pool->take(4096), b = pool->take(4096), other = pool->take(8192);
    BOOST_TEST(at(a) != at(b));
    pool->give(a);
    pool->give(other);
    pool->give(b);
    BOOST_TEST(at(pool->take(4096)) == at(b));
    BOOST_TEST(at(pool->take(4096)) == at(a));
    BOOST_TEST(at(pool->take(8192)) == at(other));
    BOOST_TEST(at(pool->take(4096)) != 0u);  // none idle of that size: a fresh one
    pool->close();
  }
  ucp_cleanup(ctx);
}

// A sealed part is ciphertext, and opens only with its cluster's key, at the worker it was
// sealed for, under the header it was sealed with.
BOOST_AUTO_TEST_CASE(a_sealed_part_opens_only_with_its_key_at_its_receiver_under_its_header) {
  const std::string key = rt::make_seal_key(), receiver = "worker address of B", plain = patterned(5000, 3);
  BOOST_TEST(key.size() == rt::ucx_seal_key_bytes);
  BOOST_TEST((key != rt::make_seal_key()));
  auto h = rt::make_part_geometry(21, 3 * 5000, 5000, 1, 3);
  std::string sealed(plain.size(), '\0');
  rt::seal_part(key, receiver, h, plain.data(), sealed.data());
  BOOST_TEST(h.sealed == 1u);
  BOOST_TEST(rt::check_frame_header(&h, sizeof h, sealed.size()).empty());
  // Not the plaintext, nor any 16-byte run of it.
  for (std::size_t at = 0; at + 16 <= plain.size(); at += 16)
    BOOST_TEST_REQUIRE(sealed.find(plain.substr(at, 16)) == std::string::npos);
  auto opened = [&](std::string bytes, const rt::ucx_frame_header& with, const std::string& k, const std::string& at) {
    auto why = rt::open_part(k, at, with, bytes.data());
    return why.empty() ? bytes : why;
  };
  BOOST_TEST((opened(sealed, h, key, receiver) == plain));
  // Sealing the same bytes again gives other ciphertext (a fresh salt, so a fresh key).
  auto h2 = rt::make_part_geometry(21, 3 * 5000, 5000, 1, 3);
  std::string again(plain.size(), '\0');
  rt::seal_part(key, receiver, h2, plain.data(), again.data());
  BOOST_TEST((again != sealed));
  const std::string refused = "did not authenticate";
  std::string flipped = sealed;
  flipped[4321] ^= 1;
  BOOST_TEST(opened(flipped, h, key, receiver).find(refused) != std::string::npos);
  BOOST_TEST(opened(sealed, h, rt::make_seal_key(), receiver).find(refused) != std::string::npos);
  BOOST_TEST(opened(sealed, h, key, "worker address of C").find(refused) != std::string::npos);
  for (auto change : std::vector<std::function<void(rt::ucx_frame_header&)>>{
           [](auto& x) { x.transfer_id = 22; }, [](auto& x) { x.part = 2; }, [](auto& x) { x.offset = 10000; },
           [](auto& x) { x.total = 20000; }, [](auto& x) { x.salt[0] ^= 1; }, [](auto& x) { x.tag[15] ^= 1; }}) {
    auto forged = h;
    change(forged);
    BOOST_TEST(opened(sealed, forged, key, receiver).find(refused) != std::string::npos);
  }
  // A frame in the clear where sealed ones are wanted, and the other way round.
  const auto clear = rt::make_frame_header(23, plain);
  BOOST_TEST(rt::check_frame_sealing(clear, true).find("sent in the clear") != std::string::npos);
  BOOST_TEST(rt::check_frame_sealing(h, false).find("ucx.encrypt: false") != std::string::npos);
  BOOST_TEST(rt::check_frame_sealing(h, true).empty());
  BOOST_TEST(rt::check_frame_sealing(clear, false).empty());
  auto flags = h;
  flags.sealed = 2;
  BOOST_TEST(rt::check_frame_header(&flags, sizeof flags, sealed.size()).find("unknown frame flags") != std::string::npos);
}

namespace {

// What `to` makes of a transfer `from` sends it, whole and in parts.
// Transfer ids `first` (4,000 bytes, whole) and `first` + 1 (all of `bytes`, in parts).
std::vector<std::string> errors_between(rt::ucx_transport& from, rt::ucx_transport& to, const std::string& bytes,
                                        uint64_t first) {
  std::vector<std::string> out;
  for (uint64_t id : {first, first + 1}) {
    auto got = std::async(std::launch::async, [&] { return to.receive_wait(id); });
    const auto buf = std::make_shared<const std::string>(id == first ? bytes.substr(0, 4000) : bytes);
    const auto sent = from.send_wait(to.address(), id, buf);
    auto r = got.get();
    if (r.error.empty()) BOOST_TEST((r.payload.view() == *buf));
    out.push_back(r.error);
  }
  return out;
}

}  // namespace

// Another cluster's key, or a sender in the clear, gets nothing accepted by a sealed receiver;
// transfers under the one key arrive intact, whole and in parts.
BOOST_AUTO_TEST_CASE(a_receiver_takes_only_transfers_sealed_under_its_clusters_key) {
  auto cfg = local("tcp", 3000);
  cfg.part_bytes = 64 << 10;
  const std::string bytes = patterned((1u << 20) + 5, 7);
  const std::string key = rt::make_seal_key();
  rt::ucx_transport b(cfg, key);
  {
    rt::ucx_transport a(cfg, key);
    for (const auto& e : errors_between(a, b, bytes, 31)) BOOST_TEST(e.empty(), e);
  }
  {
    rt::ucx_transport stranger(cfg, rt::make_seal_key());
    for (const auto& e : errors_between(stranger, b, bytes, 33))
      BOOST_TEST(e.find("did not authenticate") != std::string::npos, e);
  }
  {
    auto clear_cfg = cfg;
    clear_cfg.encrypt = false;
    rt::ucx_transport clear(clear_cfg, "");
    for (const auto& e : errors_between(clear, b, bytes, 35))
      BOOST_TEST(e.find("sent in the clear") != std::string::npos, e);
    // And without a key a sealed transport does not start.
    BOOST_CHECK_THROW(rt::ucx_transport(cfg, ""), rt::ucx_error);
  }
}
