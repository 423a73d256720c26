// The cluster YAML parser. A bad file must end in config_error (one line naming file, line and
// problem); any other exception, crash or sanitizer report is a finding.
//
// The parser opens the files the text names (token files, profile, quality curve). So that a
// fuzzed path can never reach a real file (/dev/zero would exhaust memory, /dev/stdin would
// block), every path resolves against a base directory that does not exist, and inputs that could
// leave it are skipped: any "..", "~" or "\" (a YAML escape could spell "/"), and any "/" that
// could begin a path (one not preceded by a path character, e.g. after a space or quote).
#include "runtime/cluster_config.hpp"

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

constexpr const char* missing_base_dir = "/nonexistent-dls-fuzz/base";

bool may_leave_base_dir(const std::string& text) {
  if (text.find("..") != std::string::npos || text.find_first_of("~\\") != std::string::npos) return true;
  for (std::size_t i = text.find('/'); i != std::string::npos; i = text.find('/', i + 1)) {
    if (i == 0) return true;
    const auto prev = static_cast<unsigned char>(text[i - 1]);
    if (!std::isalnum(prev) && prev != '_' && prev != '-' && prev != '.') return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("HOME", "/nonexistent-dls-fuzz/home", 1);  // "~/" paths are skipped anyway
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (may_leave_base_dir(text)) return -1;  // not kept in the corpus
  try {
    dls::runtime::parse_cluster_config(text, "fuzz.yaml", missing_base_dir);
  } catch (const dls::runtime::config_error&) {
  }
  return 0;
}
