#pragma once
// Errors in OpenAI's JSON shape: {"error": {"message", "type", "param", "code"}}.
#include <stdexcept>
#include <string>

namespace dls::gateway {

/// A request the gateway refuses; `param` names the offending field when there is one.
class api_error : public std::runtime_error {
 public:
  api_error(int status, std::string message, std::string param = {}, std::string code = {});
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  /// The JSON body OpenAI clients parse.
  std::string body() const;

 private:
  int status_;
  std::string param_;
  std::string code_;
};

/// OpenAI's error `type` for an HTTP status (invalid_request_error, authentication_error, ...).
std::string error_type(int status);

/// The JSON body for `status` with `message` (for errors raised outside a handler).
std::string error_body(int status, const std::string& message, const std::string& param = {},
                       const std::string& code = {});

}  // namespace dls::gateway
