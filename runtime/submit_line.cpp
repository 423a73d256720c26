#include "runtime/submit_line.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace dls::runtime {

namespace {

using json = nlohmann::json;

int64_t json_int(const json& line, const char* field, int64_t lo, int64_t hi, const std::string& where) {
  const auto& x = line[field];
  bool ok = x.is_number_integer() && !(x.is_number_unsigned() && x.get<uint64_t>() > static_cast<uint64_t>(hi));
  if (ok) {
    auto v = x.get<int64_t>();
    if (v >= lo && v <= hi) return v;
  }
  throw std::runtime_error(where + "\"" + field + "\" must be an integer in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "], got " + x.dump());
}

double json_real(const json& line, const char* field, double lo, double hi, const std::string& where) {
  const auto& x = line[field];
  if (x.is_number()) {
    auto v = x.get<double>();
    if (std::isfinite(v) && v >= lo && v <= hi) return v;
  }
  std::ostringstream os;
  os << where << "\"" << field << "\" must be a number in [" << lo << ", " << hi << "], got " << x.dump();
  throw std::runtime_error(os.str());
}

}  // namespace

std::optional<submit_line> parse_submit_line(const std::string& line, const submit_spec& defaults,
                                             const std::string& where) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return std::nullopt;
  auto v = json::parse(line, nullptr, false);
  if (!v.is_object() || !v.contains("prompt") || !v["prompt"].is_string())
    throw std::runtime_error(where + "expected a JSON object with a string \"prompt\"");
  submit_line j;
  j.spec = defaults;
  j.spec.prompt = v["prompt"];
  constexpr int64_t int32_max = std::numeric_limits<int32_t>::max();  // the wire fields are 32-bit
  if (v.contains("threshold")) j.spec.threshold = json_real(v, "threshold", 0.0, 1.0, where);
  if (v.contains("min_threshold")) j.spec.min_threshold = json_real(v, "min_threshold", 0.0, 1.0, where);
  if (v.contains("gen_length")) j.spec.gen_length = static_cast<int32_t>(json_int(v, "gen_length", 1, int32_max, where));
  if (v.contains("on_miss")) {
    const auto& m = v["on_miss"];
    if (!m.is_string() || (m != "serve" && m != "reject"))
      throw std::runtime_error(where + "\"on_miss\" must be \"serve\" or \"reject\"");
    j.spec.reject_on_miss = m == "reject";
  }
  // Dream's sampler options and the commit rule, in decode_settings::validate's ranges (whether
  // they make one decode together with the cluster's settings is the head's check).
  if (v.contains("top_p")) {
    const auto& x = v["top_p"];
    if (!x.is_number() || !(x.get<double>() > 0.0 && x.get<double>() <= 1.0))
      throw std::runtime_error(where + "\"top_p\" must be a number in (0, 1], got " + x.dump());
    j.spec.top_p = x.get<double>();
  }
  if (v.contains("top_k")) j.spec.top_k = static_cast<int32_t>(json_int(v, "top_k", 0, int32_max, where));
  if (v.contains("alg_temp")) {
    const auto& x = v["alg_temp"];
    if (!x.is_number() || !(x.get<double>() >= 0.0) || !std::isfinite(x.get<double>()))
      throw std::runtime_error(where + "\"alg_temp\" must be a finite number >= 0, got " + x.dump());
    j.spec.alg_temp = x.get<double>();
  }
  if (v.contains("schedule")) {
    const auto& x = v["schedule"];
    if (!x.is_string() || (x != "even" && x != "dream_linear"))
      throw std::runtime_error(where + "\"schedule\" must be \"even\" or \"dream_linear\", got " + x.dump());
    j.spec.schedule = static_cast<int32_t>(common::parse_step_schedule(x.get<std::string>()));
  }
  if (v.contains("eps")) {
    const auto& x = v["eps"];
    if (!x.is_number() || !(x.get<double>() >= 0.0 && x.get<double>() < 1.0))
      throw std::runtime_error(where + "\"eps\" must be a number in [0, 1), got " + x.dump());
    j.spec.eps = x.get<double>();
  }
  if (v.contains("commit")) {
    const auto& x = v["commit"];
    try {
      if (!x.is_string()) throw std::invalid_argument("not a string");
      j.spec.rule = static_cast<int32_t>(common::parse_commit_rule(x.get<std::string>()));
    } catch (const std::invalid_argument&) {
      throw std::runtime_error(where + "\"commit\" must be one of \"quota\", \"threshold\", \"factor\", \"margin\", "
                               "\"entropy\", \"origin\", got " + x.dump());
    }
  }
  if (v.contains("steps_per_block"))
    j.spec.steps_per_block =
        static_cast<int32_t>(json_int(v, "steps_per_block", 0, common::max_steps_per_block, where));
  if (v.contains("slo_ms")) j.spec.slo_ms = static_cast<int32_t>(json_int(v, "slo_ms", 0, int32_max, where));
  // A replay longer than a day is not a replay of a serving trace; the bound keeps the
  // client's clock arithmetic far from overflow.
  constexpr double max_at_s = 86400.0;
  if (v.contains("at_s")) j.at_s = json_real(v, "at_s", 0.0, max_at_s, where);
  try {
    if (v.contains("answer")) j.valid.push_back(v["answer"].get<std::string>());
    if (v.contains("valid")) for (auto& x : v["valid"]) j.valid.push_back(x.get<std::string>());
  } catch (const std::exception&) {
    throw std::runtime_error(where + "\"answer\" must be a string and \"valid\" a list of strings");
  }
  return j;
}

}  // namespace dls::runtime
