#pragma once
// A JSON body for an HTTP client. Strings in it can hold bytes a client sent (an unknown model
// name, a parse error quoting the body) or a model produced, and those need not be valid UTF-8;
// nlohmann::json::dump throws on them, so they are written as U+FFFD instead.
#include <nlohmann/json.hpp>

#include <string>

namespace dls::gateway {

inline std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace dls::gateway
