#include "gateway/answer_error.hpp"

#include <cstring>

namespace dls::gateway {

namespace rt = dls::runtime;

api_error answer_error(const rt::answer& a) {
  const auto& e = a.error;
  if (e.rfind("no live TP group", 0) == 0) return api_error(503, "the cluster could not place the request: " + e);
  if (e.rfind(rt::overloaded_error, 0) == 0)
    return api_error(429, "the cluster is overloaded; retry later: " + e.substr(std::strlen(rt::overloaded_error)), "",
                     "overloaded");
  if (e.rfind(rt::deadline_refused_error, 0) == 0)
    return api_error(429, "the request cannot meet its deadline (on_miss: reject): " +
                              e.substr(std::strlen(rt::deadline_refused_error)), "", "deadline_unreachable");
  if (e.rfind("timed out", 0) == 0) return api_error(504, "the request " + e + " and was withdrawn");
  if (e.find("exceeds the model's") != std::string::npos) return api_error(413, e, "prompt", "context_length_exceeded");
  return api_error(500, "the cluster failed the request: " + e);
}

}  // namespace dls::gateway
