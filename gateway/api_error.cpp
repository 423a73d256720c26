#include "gateway/api_error.hpp"
#include "gateway/json_text.hpp"

#include <nlohmann/json.hpp>

namespace dls::gateway {

api_error::api_error(int status, std::string message, std::string param, std::string code)
    : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)), code_(std::move(code)) {}

std::string api_error::body() const { return error_body(status_, what(), param_, code_); }

std::string error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    case 504: return "timeout_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string error_body(int status, const std::string& message, const std::string& param, const std::string& code) {
  nlohmann::json e{{"message", message}, {"type", error_type(status)}};
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return json_text(nlohmann::json{{"error", e}});
}

}  // namespace dls::gateway
