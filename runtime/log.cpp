#include "runtime/log.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>

namespace dls::runtime {

void log_line(const std::string& who, const std::string& message) {
  auto now = std::chrono::system_clock::now();
  auto t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[64];
  std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03lld", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(ms));
  std::string line = std::string(stamp) + " [" + who + "] " + message + "\n";
  [[maybe_unused]] auto n = ::write(2, line.data(), line.size());
}

}  // namespace dls::runtime
