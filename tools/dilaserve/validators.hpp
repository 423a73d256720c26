#pragma once
// Number checks for CLI options. CLI11's own PositiveNumber and NonNegativeNumber report
// "not in range 0 to 1.797...e308" with the whole double written out; these name the rule.
#include <CLI/CLI.hpp>

#include <cmath>
#include <string>

namespace dls::cli {

namespace detail {
inline std::string number_check(const std::string& s, bool allow_zero) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    return "'" + s + "' is not a number";
  }
  if (used != s.size() || !std::isfinite(v)) return "'" + s + "' is not a number";
  if (allow_zero ? v < 0 : v <= 0) return (allow_zero ? "must be >= 0, got " : "must be > 0, got ") + s;
  return {};
}
}  // namespace detail

/// A finite number > 0.
inline const CLI::Validator positive{[](std::string& s) { return detail::number_check(s, false); }, "> 0"};
/// A finite number >= 0.
inline const CLI::Validator non_negative{[](std::string& s) { return detail::number_check(s, true); }, ">= 0"};

/// A finite number in [0, 1] (CLI11's Range lets NaN through: every comparison with it is false).
inline const CLI::Validator unit_interval{[](std::string& s) {
                                            if (auto why = detail::number_check(s, true); !why.empty()) return why;
                                            return std::stod(s) <= 1.0 ? std::string{}
                                                                       : "must be in [0, 1], got " + s;
                                          },
                                          "in [0, 1]"};

/// A finite number in (0, 1]: a top-p (an empty nucleus is no distribution).
inline const CLI::Validator nucleus{[](std::string& s) {
                                      if (auto why = detail::number_check(s, false); !why.empty()) return why;
                                      return std::stod(s) <= 1.0 ? std::string{} : "must be in (0, 1], got " + s;
                                    },
                                    "in (0, 1]"};

/// A finite number in [0, 1): Dream's eps, the last timestep of its schedule.
inline const CLI::Validator last_timestep{[](std::string& s) {
                                            if (auto why = detail::number_check(s, true); !why.empty()) return why;
                                            return std::stod(s) < 1.0 ? std::string{} : "must be in [0, 1), got " + s;
                                          },
                                          "in [0, 1)"};

/// The most requests one simulated run takes: 20x the 1,024-GPU target run of a million, at
/// about 230 bytes a request (measured: 1 M requests 445 MB, 100 k 238 MB) some 5 GB of memory.
/// Beyond it a run fails for memory, not time.
inline constexpr unsigned long long max_sim_requests = 20'000'000;

/// A request count in [1, max_sim_requests].
inline const CLI::Validator sim_requests{[](std::string& s) {
                                           if (auto why = detail::number_check(s, false); !why.empty()) return why;
                                           return std::stod(s) <= static_cast<double>(max_sim_requests)
                                                      ? std::string{}
                                                      : "must be at most " + std::to_string(max_sim_requests) +
                                                            " (about 230 bytes a simulated request), got " + s;
                                         },
                                         "in [1, 20000000]"};

}  // namespace dls::cli
