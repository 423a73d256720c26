#pragma once
// One timestamped line per event on stderr, which `up` redirects into the process's
// log file. Lines are written whole so concurrent actors never interleave mid-line.
#include <string>

namespace dls::runtime {

/// Writes "2026-01-01T12:00:00.123 [who] message".
void log_line(const std::string& who, const std::string& message);

}  // namespace dls::runtime
