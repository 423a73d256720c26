// The head's write-ahead log without a cluster: record framing, a torn or corrupt tail
// (dropped, never a crash), the journal's records and their replay, checkpoints that bound the
// log, and the bound on kept answers.
#define BOOST_TEST_MODULE test_runtime_wal
#include <boost/test/unit_test.hpp>

#include "runtime/head_journal.hpp"
#include "runtime/wal.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <future>
#include <thread>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
namespace rt = dls::runtime;

namespace {

struct temp_dir {
  std::string path;
  temp_dir() {
    char tmpl[] = "/tmp/dls-wal-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string image_of(const std::vector<std::string>& records) {
  std::string image(rt::wal_magic());
  for (const auto& r : records) image += rt::frame_wal_record(r);
  return image;
}

rt::journal_request request(uint64_t id, const std::string& key) {
  rt::journal_request r;
  r.id = id;
  r.key = key;
  r.spec.prompt = "A8341.+962.....=";
  r.spec.threshold = 0.8;
  r.spec.min_threshold = -1;
  r.spec.slo_ms = 250;
  r.spec.gen_length = 16;
  r.spec.tag = id * 10;
  r.spec.key = key;
  r.arrival_unix_ms = 1700000000000 + static_cast<int64_t>(id);
  return r;
}

rt::answer answer_for(uint64_t id, const std::string& text) {
  rt::answer a;
  a.request_id = id;
  a.ok = true;
  a.text = text;
  a.steps = 4;
  a.tokens = 16;
  a.latency_ms = 12.5;
  a.threshold = 0.9;
  a.node = "node0";
  a.group = "node0/g0";
  return a;
}

}  // namespace

BOOST_AUTO_TEST_CASE(records_round_trip_through_an_image) {
  std::vector<std::string> records{"one", "", std::string(1000, 'x'), std::string("\0\1\2", 3)};
  auto scan = rt::parse_wal(image_of(records));
  BOOST_TEST(scan.problem.empty(), scan.problem);
  BOOST_TEST(scan.records == records);
  BOOST_TEST(scan.good_bytes == image_of(records).size());
  BOOST_TEST(rt::parse_wal("").records.empty());
  BOOST_TEST(rt::parse_wal("").problem.empty());
}

BOOST_AUTO_TEST_CASE(a_torn_tail_keeps_every_record_before_it) {
  auto image = image_of({"first", "second", "third"});
  // Every cut inside the last record (its header or its payload) keeps the first two.
  auto two = image_of({"first", "second"}).size();
  for (std::size_t cut = two + 1; cut < image.size(); ++cut) {
    auto scan = rt::parse_wal(image.substr(0, cut));
    BOOST_TEST(scan.records.size() == 2u, "cut at " << cut);
    BOOST_TEST(scan.good_bytes == two);
    BOOST_TEST(scan.problem.find("torn") != std::string::npos, scan.problem);
  }
}

BOOST_AUTO_TEST_CASE(a_corrupt_checksum_or_length_stops_the_replay_there) {
  auto image = image_of({"first", "second", "third"});
  auto one = image_of({"first"}).size();
  auto flipped = image;
  flipped[one + 8 + 2] ^= 0x40;  // a payload byte of "second"
  auto scan = rt::parse_wal(flipped);
  BOOST_TEST(scan.records == std::vector<std::string>{"first"});
  BOOST_TEST(scan.good_bytes == one);
  BOOST_TEST(scan.problem.find("checksum") != std::string::npos, scan.problem);

  auto huge = image;
  huge[one + 3] = static_cast<char>(0x7f);  // the length's top byte: far over the limit
  scan = rt::parse_wal(huge);
  BOOST_TEST(scan.records.size() == 1u);
  BOOST_TEST(scan.problem.find("over the limit") != std::string::npos, scan.problem);

  scan = rt::parse_wal("not a log at all");
  BOOST_TEST(scan.records.empty());
  BOOST_TEST(scan.good_bytes == 0u);
  BOOST_TEST(!scan.problem.empty());
}

BOOST_AUTO_TEST_CASE(a_log_file_truncates_a_damaged_tail_and_appends_after_it) {
  temp_dir dir;
  auto path = dir.file("x.wal");
  {
    rt::wal_file wal(path);
    BOOST_TEST(wal.recovered().empty());
    wal.append("a", true);
    wal.append("bb", false);
    wal.append("ccc", true);
  }
  auto image = read_all(path);
  write_all(path, image.substr(0, image.size() - 2));  // a crash in the middle of "ccc"
  {
    rt::wal_file wal(path);
    BOOST_TEST(wal.recovered() == (std::vector<std::string>{"a", "bb"}));
    BOOST_TEST(fs::file_size(path) == image_of({"a", "bb"}).size());
    wal.append("dddd", true);
  }
  rt::wal_file wal(path);
  BOOST_TEST(wal.recovered() == (std::vector<std::string>{"a", "bb", "dddd"}));

  // A file that is not a log starts over, empty.
  write_all(dir.file("junk.wal"), "garbage bytes");
  rt::wal_file junk(dir.file("junk.wal"));
  BOOST_TEST(junk.recovered().empty());
  BOOST_TEST(read_all(dir.file("junk.wal")) == std::string(rt::wal_magic()));
}

BOOST_AUTO_TEST_CASE(rewrite_replaces_the_log_atomically) {
  temp_dir dir;
  auto path = dir.file("x.wal");
  rt::wal_file wal(path);
  for (int i = 0; i < 100; ++i) wal.append(std::string(100, 'a'), false);
  wal.rewrite({"kept"});
  wal.append("after", true);
  BOOST_TEST(!fs::exists(path + ".tmp"));
  rt::wal_file again(path);
  BOOST_TEST(again.recovered() == (std::vector<std::string>{"kept", "after"}));
}

BOOST_AUTO_TEST_CASE(the_journal_replays_requests_membership_layout_policy_port_slo_overhead_and_data_key) {
  temp_dir dir;
  const std::string key(32, '\x07');
  {
    rt::head_journal j(dir.path, false, 100);
    j.port(45001);
    j.data_key(key);
    j.joined("node0", 1);
    j.layout("node0", {1, 1});
    j.policy("dilaserve");
    j.slo_overhead(2.5);
    j.accepted(request(1, "k1"));
    j.accepted(request(2, "k2"));
    j.accepted(request(3, ""));
    j.snapshot(1, {'c', 'v', '1'}, 4, 8);
    j.snapshot(1, {'c', 'v', '2'}, 8, 16);
    j.finished(2, answer_for(2, "12345"));
    j.joined("node0", 2);
  }
  rt::head_journal j(dir.path, true, 100);
  const auto& st = j.recovered();
  BOOST_TEST(st.port == 45001);
  BOOST_TEST(st.joins.at("node0") == 2u);
  BOOST_TEST(st.layouts.at("node0") == (std::vector<int32_t>{1, 1}));
  BOOST_TEST(st.policy == "dilaserve");
  BOOST_TEST(st.slo_request_overhead_ms == 2.5);
  BOOST_TEST((st.data_key == key));
  BOOST_TEST(st.next_id == 4u);
  BOOST_REQUIRE(st.live.size() == 2u);
  const auto& r1 = st.live.at(1);
  BOOST_TEST(r1.key == "k1");
  BOOST_TEST(r1.spec.prompt == "A8341.+962.....=");
  BOOST_TEST(r1.spec.threshold == 0.8);
  BOOST_TEST(r1.spec.slo_ms == 250);
  BOOST_TEST(r1.spec.tag == 10u);
  BOOST_TEST(r1.arrival_unix_ms == 1700000000001);
  BOOST_TEST((r1.canvas == std::vector<char>{'c', 'v', '2'}));
  BOOST_TEST(r1.steps == 8);
  BOOST_TEST(r1.tokens == 16);
  BOOST_TEST(st.live.count(3) == 1u);
  BOOST_TEST(st.live_by_key.at("k1") == 1u);
  BOOST_TEST(st.live_by_key.count("k2") == 0u);
  auto done = j.finished_answer("k2");
  BOOST_REQUIRE(done.has_value());
  BOOST_TEST(done->text == "12345");
  BOOST_TEST(done->request_id == 2u);
  BOOST_TEST(!j.finished_answer("k1").has_value());

  // A fresh (not recovering) head starts an empty log and keeps the old one beside it.
  rt::head_journal fresh(dir.path, false, 100);
  BOOST_TEST(fresh.recovered().live.empty());
  BOOST_TEST(fresh.recovered().next_id == 1u);
  BOOST_TEST(fs::exists(dir.file("head.wal.prev")));
}

BOOST_AUTO_TEST_CASE(a_requests_sampler_options_survive_the_journal) {
  // A restarted head resubmits a request not yet snapshotted from its spec: the client's
  // top_p / top_k / alg_temp / schedule / eps and commit rule with its steps per block must come
  // back with it, and a record written before they existed must read as "the cluster's" (-1),
  // not as 0 (off, or for steps_per_block the block length).
  rt::journal_state st;
  auto r = request(7, "s");
  r.spec.top_p = 0.75;
  r.spec.top_k = 0;
  r.spec.alg_temp = 0.5;
  r.spec.schedule = 1;
  r.spec.eps = 0.25;
  r.spec.rule = static_cast<int32_t>(dls::common::commit_rule::margin);
  r.spec.steps_per_block = 0;
  rt::apply_record(st, rt::encode_accepted(r), 10);
  const auto& got = st.live.at(7).spec;
  BOOST_TEST(got.top_p == 0.75);
  BOOST_TEST(got.top_k == 0);
  BOOST_TEST(got.alg_temp == 0.5);
  BOOST_TEST(got.schedule == 1);
  BOOST_TEST(got.eps == 0.25);
  BOOST_TEST(got.rule == static_cast<int32_t>(dls::common::commit_rule::margin));
  BOOST_TEST(got.steps_per_block == 0);

  auto old = nlohmann::json::from_cbor(rt::encode_accepted(request(8, "")));
  for (const char* f : {"top_p", "top_k", "alg_temp", "schedule", "eps", "rule", "steps_per_block"}) old.erase(f);
  const auto bytes = nlohmann::json::to_cbor(old);
  rt::apply_record(st, std::string(bytes.begin(), bytes.end()), 10);
  const auto& was = st.live.at(8).spec;
  BOOST_TEST(was.top_p == -1);
  BOOST_TEST(was.top_k == -1);
  BOOST_TEST(was.alg_temp == -1);
  BOOST_TEST(was.schedule == -1);
  BOOST_TEST(was.eps == -1);
  BOOST_TEST(was.rule == -1);
  BOOST_TEST(was.steps_per_block == -1);
}

BOOST_AUTO_TEST_CASE(checkpoints_bound_the_log_and_keep_the_state) {
  temp_dir dir;
  constexpr std::uint64_t small = 16 * 1024;
  rt::journal_state before;
  {
    rt::head_journal j(dir.path, false, 5, small);
    j.joined("node0", 3);
    j.slo_overhead(1.25);
    j.data_key(std::string(32, 'd'));
    // 2000 requests come and go, each with snapshots; 10 stay in flight.
    for (uint64_t id = 1; id <= 2000; ++id) {
      j.accepted(request(id, "k" + std::to_string(id)));
      j.snapshot(id, std::vector<char>(200, static_cast<char>(id)), 4, 8);
      if (id <= 1990) j.finished(id, answer_for(id, "t" + std::to_string(id)));
    }
    BOOST_TEST(j.compactions() > 0u);
    BOOST_TEST(j.bytes() <= 2 * small + 4096, j.bytes());
    before = j.state();
  }
  BOOST_TEST(fs::file_size(dir.file("head.wal")) < 2 * small + 4096);
  rt::head_journal j(dir.path, true, 5, small);
  const auto& st = j.recovered();
  BOOST_TEST(st.live.size() == 10u);
  BOOST_TEST(st.next_id == 2001u);
  BOOST_TEST(st.joins.at("node0") == 3u);
  BOOST_TEST(st.slo_request_overhead_ms == 1.25);
  BOOST_TEST((st.data_key == std::string(32, 'd')));  // kept through the checkpoints
  for (const auto& [id, r] : before.live) {
    BOOST_REQUIRE(st.live.count(id) == 1u);
    BOOST_TEST(st.live.at(id).canvas == r.canvas);
  }
  // Only the newest 5 keyed answers are kept.
  BOOST_TEST(st.finished.size() == 5u);
  BOOST_TEST(j.finished_answer("k1990").has_value());
  BOOST_TEST(!j.finished_answer("k1985").has_value());
}

BOOST_AUTO_TEST_CASE(an_unreadable_record_drops_it_and_what_follows_with_a_warning) {
  temp_dir dir;
  {
    rt::head_journal j(dir.path, false, 10);
    j.accepted(request(1, "a"));
  }
  // An intact frame around a payload that is not a record, then a valid record after it.
  auto path = dir.file("head.wal");
  auto image = read_all(path);
  image += rt::frame_wal_record("\xff\xfe not cbor");
  image += rt::frame_wal_record(rt::encode_joined("node0", 7));
  write_all(path, image);
  {
    rt::head_journal j(dir.path, true, 10);
    BOOST_TEST(j.recovered().live.size() == 1u);
    BOOST_TEST(j.recovered().joins.empty());
  }
  // The log was rewritten without them: the next open reads cleanly.
  rt::wal_file wal(path);
  BOOST_TEST(rt::parse_wal(read_all(path)).problem.empty());
  BOOST_TEST(!wal.recovered().empty());
}

BOOST_AUTO_TEST_CASE(record_decoding_refuses_malformed_payloads_with_a_journal_error) {
  rt::journal_state st;
  for (const std::string& bad : {std::string(), std::string("\xa0", 1) /* an empty CBOR map */,
                                rt::encode_port(1).substr(0, 5), std::string("\x01", 1)})
    BOOST_CHECK_THROW(rt::apply_record(st, bad, 10), rt::journal_error);
  BOOST_CHECK_THROW(rt::apply_record(st, rt::encode_port(70000), 10), rt::journal_error);
  rt::apply_record(st, rt::encode_port(6390), 10);
  BOOST_TEST(st.port == 6390);
  BOOST_CHECK_THROW(rt::apply_record(st, rt::encode_slo_overhead(-1), 10), rt::journal_error);
  rt::apply_record(st, rt::encode_slo_overhead(3), 10);
  BOOST_TEST(st.slo_request_overhead_ms == 3.0);
  BOOST_CHECK_THROW(rt::apply_record(st, rt::encode_data_key("short"), 10), rt::journal_error);
  BOOST_TEST(st.data_key.empty());
}

BOOST_AUTO_TEST_CASE(accepts_written_together_are_made_durable_by_one_sync) {
  temp_dir dir;
  {
    rt::head_journal j(dir.path, false, 10);
    for (uint64_t id = 1; id <= 50; ++id) j.accepted(request(id, "g" + std::to_string(id)), false);
    j.sync();
  }
  rt::head_journal j(dir.path, true, 10);
  BOOST_TEST(j.recovered().live.size() == 50u);
  BOOST_TEST(j.recovered().next_id == 51u);
}

BOOST_AUTO_TEST_CASE(a_sync_asked_for_later_runs_on_the_journals_thread_and_covers_what_came_before) {
  temp_dir dir;
  {
    rt::head_journal j(dir.path, false, 10);
    std::vector<std::future<std::pair<std::string, std::thread::id>>> done;
    std::vector<std::promise<std::pair<std::string, std::thread::id>>> promises(3);
    for (uint64_t batch = 0; batch < 3; ++batch) {
      for (uint64_t k = 1; k <= 20; ++k) j.accepted(request(batch * 20 + k, "b" + std::to_string(batch * 20 + k)), false);
      done.push_back(promises[batch].get_future());
      j.sync_later([&p = promises[batch]](const std::string& error) { p.set_value({error, std::this_thread::get_id()}); });
    }
    for (auto& f : done) {
      auto [error, thread] = f.get();
      BOOST_TEST(error.empty(), error);
      BOOST_TEST((thread != std::this_thread::get_id()));
    }
  }
  rt::head_journal j(dir.path, true, 10);
  BOOST_TEST(j.recovered().live.size() == 60u);
}

BOOST_AUTO_TEST_CASE(the_journals_thread_checkpoints_a_log_that_outgrew_the_threshold) {
  temp_dir dir;
  constexpr std::uint64_t small = 16 * 1024;
  rt::head_journal j(dir.path, false, 5, small);
  for (uint64_t id = 1; id <= 400; ++id) {
    j.accepted(request(id, "c" + std::to_string(id)), false);
    j.finished(id, answer_for(id, "t"));
  }
  // No append waits for the checkpoint: the journal's thread writes it, at the latest with the
  // next sync it runs.
  std::promise<void> synced;
  j.sync_later([&](const std::string&) { synced.set_value(); });
  synced.get_future().get();
  BOOST_TEST(j.compactions() > 0u);
  BOOST_TEST(j.bytes() <= 2 * small + 4096, j.bytes());
}
