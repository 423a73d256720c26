// A head's write-ahead log image (what `start --head --recover` reads after a crash): parsing
// keeps an intact prefix of records and never reads past the image; each record either applies
// to the journal's state or ends in journal_error; a checkpoint of that state rebuilds it.
#include "runtime/head_journal.hpp"
#include "runtime/wal.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace rt = dls::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view image(reinterpret_cast<const char*>(data), size);
  const auto scan = rt::parse_wal(image);
  if (scan.good_bytes > image.size()) std::abort();
  // The intact prefix is exactly the header and the records, framed again.
  if (scan.good_bytes > 0) {
    std::string again(rt::wal_magic());
    for (const auto& r : scan.records) again += rt::frame_wal_record(r);
    if (again != image.substr(0, scan.good_bytes)) std::abort();
  } else if (!scan.records.empty()) {
    std::abort();
  }
  if (scan.good_bytes < image.size() && scan.problem.empty()) std::abort();
  constexpr std::size_t kept = 4;  // small, so the bound on kept answers is exercised
  rt::journal_state st;
  for (const auto& r : scan.records) {
    try {
      rt::apply_record(st, r, kept);
    } catch (const rt::journal_error&) {
      break;  // the journal stops its replay here too
    }
  }
  if (st.finished.size() > kept) std::abort();
  rt::journal_state rebuilt;
  for (const auto& r : rt::checkpoint_records(st)) rt::apply_record(rebuilt, r, kept);
  if (rebuilt.next_id != st.next_id || rebuilt.live.size() != st.live.size() || rebuilt.joins != st.joins ||
      rebuilt.layouts != st.layouts || rebuilt.policy != st.policy || rebuilt.port != st.port ||
      rebuilt.finished.size() != st.finished.size() || rebuilt.live_by_key != st.live_by_key)
    std::abort();
  for (const auto& [id, r] : st.live) {
    const auto& b = rebuilt.live.at(id);
    if (b.canvas != r.canvas || b.key != r.key || b.spec.prompt != r.spec.prompt || b.steps != r.steps) std::abort();
  }
  return 0;
}
