#pragma once
// What the head persists so that a restarted head (`start --head --recover`) carries on:
// accepted requests with their latest canvas, finished answers of keyed requests, node
// incarnations, each node's layout, the active policy and the published port. Each change is
// one record of the write-ahead log (runtime/wal.hpp); replaying the records rebuilds the
// state, and a checkpoint of that state replaces the log when it grows (docs/reliability.md,
// "Head failure", says which records are synced and why).
#include "runtime/messages.hpp"
#include "runtime/wal.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace dls::runtime {

struct journal_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// An accepted request as the log knows it.
struct journal_request {
  uint64_t id = 0;
  std::string key;  // the client's key for re-attaching (submit_spec::key); may be empty
  submit_spec spec;  // client and stream target are not persisted
  int64_t arrival_unix_ms = 0;
  std::vector<char> canvas;  // the latest snapshot; empty: resume from the prompt
  int32_t steps = 0;
  int32_t tokens = 0;
};

struct journal_state {
  uint64_t next_id = 1;
  std::map<uint64_t, journal_request> live;
  std::map<std::string, uint64_t> live_by_key;
  std::deque<std::pair<std::string, answer>> finished;  // keyed answers, oldest first
  std::map<std::string, uint32_t> joins;                // node -> how many times it joined
  std::map<std::string, std::vector<int32_t>> layouts;  // node -> group sizes, as last registered
  std::string policy;                                   // empty: the cluster file's
  int port = 0;                                         // 0: not published yet
  double slo_request_overhead_ms = -1;                  // < 0: not measured yet
  std::string data_key;                                 // the data plane's key; empty: not made yet
};

/// One record's payload (CBOR) for each kind of change.
std::string encode_accepted(const journal_request& r);
std::string encode_snapshot(uint64_t id, const std::vector<char>& canvas, int32_t steps, int32_t tokens);
std::string encode_finished(uint64_t id, const std::string& key, const answer& a);
std::string encode_joined(const std::string& node, uint32_t joins);
std::string encode_layout(const std::string& node, const std::vector<int32_t>& sizes);
std::string encode_policy(const std::string& name);
std::string encode_port(int port);
std::string encode_slo_overhead(double ms);
std::string encode_data_key(const std::string& key);

/// Applies one record to `st`; `finished_kept` bounds the keyed answers kept. Throws
/// journal_error (one line) for a payload that is not a record of this version.
void apply_record(journal_state& st, const std::string& payload, std::size_t finished_kept);

/// The records that rebuild `st` exactly (a checkpoint).
std::vector<std::string> checkpoint_records(const journal_state& st);

class head_journal {
 public:
  /// Opens DIR/head.wal. `recover`: replays it (a damaged tail is dropped with a warning);
  /// otherwise an existing log is kept as head.wal.prev and a new one starts. `compact_min_bytes`:
  /// the log is replaced by a checkpoint once it is larger than this and twice the last one.
  head_journal(const std::string& dir, bool recover, std::size_t finished_kept,
               std::uint64_t compact_min_bytes = default_compact_min_bytes);
  /// Runs the syncs still asked for, then stops the journal's thread.
  ~head_journal();
  head_journal(const head_journal&) = delete;
  head_journal& operator=(const head_journal&) = delete;

  /// The state found at open.
  const journal_state& recovered() const { return recovered_; }

  // Synced before returning (fdatasync): the client may rely on them. `accepted` with
  // `sync` false leaves the sync to a later sync() or sync_later() that covers many (a group
  // commit).
  void accepted(const journal_request& r, bool sync = true);
  /// Makes every record written before the call durable (and checkpoints the log if it is due).
  void sync();
  /// The same on the journal's own thread, which then calls `done("")`, or `done(reason)` if
  /// the sync failed. For actors: a sync can take seconds behind other writes to the disk, and
  /// no scheduler thread of CAF may wait that long. Syncs asked for together share one fdatasync.
  using synced_fn = std::function<void(const std::string& error)>;
  void sync_later(synced_fn done);
  void joined(const std::string& node, uint32_t joins);
  void layout(const std::string& node, const std::vector<int32_t>& sizes);
  void policy(const std::string& name);
  void port(int port);
  /// The path overhead per request that deadlines count, once measured: a restarted head
  /// keeps its requests' windows instead of timing probes among recovered work.
  void slo_overhead(double ms);
  /// The data plane's key, so that a restarted head hands its nodes the key their peers seal with.
  void data_key(const std::string& key);

  // Written, not synced: a SIGKILLed process loses nothing written (the kernel holds it);
  // after a machine crash a lost snapshot only means resuming from an older canvas, and a
  // lost completion means decoding a request again. The next synced record covers them.
  void snapshot(uint64_t id, const std::vector<char>& canvas, int32_t steps, int32_t tokens);
  void finished(uint64_t id, const answer& a);

  /// The answer of a finished keyed request still kept, if any.
  std::optional<answer> finished_answer(const std::string& key) const;

  /// A copy of the current state (tests; `status` does not need it).
  journal_state state() const;
  std::uint64_t bytes() const;
  std::size_t compactions() const;
  const std::string& path() const { return wal_.path(); }

  /// 8 MiB of records replay in well under a second and hold thousands of snapshots, so
  /// checkpoints (which write only the live state) are rare.
  static constexpr std::uint64_t default_compact_min_bytes = 8u << 20;

 private:
  // Under mu_; does not sync.
  void append(const std::string& payload);
  // The same for the per-request records, which change the state by `apply` rather than by
  // decoding what was just encoded.
  void append_applied(const std::string& payload, const std::function<void()>& apply);
  // Takes mu_ to append, then syncs outside it: the rare records a caller relies on (joins,
  // layouts, the policy, the port).
  void append_synced(const std::string& payload);
  // Under mu_: flags a checkpoint for the next sync once the log has outgrown the last one.
  void note_growth();
  // Under sync_mu_: the checkpoint if one is due, then the fdatasync.
  void sync_locked();
  void run_syncs();

  // Lock order: sync_mu_ before mu_. Appends take mu_ only, so an fdatasync (under sync_mu_)
  // never makes an appending actor wait.
  mutable std::mutex mu_;
  std::mutex sync_mu_;
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::vector<synced_fn> waiting_;  // under queue_mu_
  bool stopping_ = false;           // under queue_mu_
  std::atomic<bool> compact_due_{false};
  std::size_t finished_kept_;
  std::uint64_t compact_min_bytes_;
  std::uint64_t compact_at_;
  std::size_t compactions_ = 0;
  wal_file wal_;
  journal_state state_;
  journal_state recovered_;
  std::thread syncer_;  // last: it starts once everything above exists
};

using head_journal_ptr = std::shared_ptr<head_journal>;

}  // namespace dls::runtime
