#pragma once
// A write-ahead log file: a magic header, then records framed as [length u32][crc32 u32]
// [payload], little-endian. It knows nothing of what the payloads mean (runtime/head_journal
// does). Opening it drops a torn or corrupt tail (a crash in the middle of an append) with one
// warning line; the file is never left unreadable.
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dls::runtime {

/// What parsing a log image found: every intact record up to the first damage.
struct wal_scan {
  std::vector<std::string> records;
  std::size_t good_bytes = 0;  // the intact prefix, header included
  std::string problem;         // empty: the whole image is intact
};

/// Parses a log image (pure: the fuzz harness and the tests call it on bytes). An empty image
/// is an empty log; an image that does not start with the magic header keeps no record.
wal_scan parse_wal(std::string_view image);

/// The header every log starts with.
std::string_view wal_magic();

/// One record framed for the log (header not included).
std::string frame_wal_record(std::string_view payload);

/// The largest payload a record may carry; a length above it is damage, not a record.
constexpr std::uint32_t wal_max_record_bytes = 64u << 20;

class wal_file {
 public:
  /// Opens or creates `path`, reads every intact record into `recovered()` and truncates any
  /// damaged tail (logging one warning line naming the offset and the damage). Throws
  /// std::runtime_error naming the path when the file cannot be opened or written.
  explicit wal_file(std::string path);
  ~wal_file();
  wal_file(const wal_file&) = delete;
  wal_file& operator=(const wal_file&) = delete;

  /// The records found at open (moved out by the caller).
  std::vector<std::string>& recovered() { return recovered_; }

  /// Appends one record; with `sync`, returns only once it (and everything before it) is on
  /// disk (fdatasync). Throws std::runtime_error on a failed write.
  void append(std::string_view payload, bool sync);

  /// Makes every record appended before the call durable. It may run beside `append` on
  /// another thread (records appended meanwhile are left to the next sync), never beside
  /// `rewrite` or another `sync`: the caller serialises those.
  void sync();

  /// Replaces the whole log by `records` atomically: written to PATH.tmp, synced, renamed over
  /// the log, and the directory synced. Appends continue on the new file.
  void rewrite(const std::vector<std::string>& records);

  std::uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::atomic<bool> dirty_{false};  // appended since the last sync began
  std::vector<std::string> recovered_;
};

}  // namespace dls::runtime
