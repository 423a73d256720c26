#pragma once
// Bearer-key checks. Keys are compared in constant time over every key held, so the
// response time tells nothing about how close a guess was, and keys are never logged.
#include <string>
#include <vector>

namespace dls::gateway {

class api_keys {
 public:
  explicit api_keys(std::vector<std::string> keys);
  /// True when `authorization` is exactly "Bearer KEY" for one of the keys.
  bool allows(const std::string& authorization) const;

 private:
  std::vector<std::string> keys_;
};

/// Equal without an early exit on the first differing byte or on a length mismatch.
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace dls::gateway
