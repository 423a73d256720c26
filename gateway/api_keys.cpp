#include "gateway/api_keys.hpp"

#include <algorithm>

namespace dls::gateway {

api_keys::api_keys(std::vector<std::string> keys) : keys_(std::move(keys)) {}

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Walks the longer length, reading past neither string, and folds the length
  // difference into the same accumulator.
  std::size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (std::size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

bool api_keys::allows(const std::string& authorization) const {
  static const std::string scheme = "Bearer ";
  if (authorization.size() <= scheme.size() || authorization.compare(0, scheme.size(), scheme) != 0) return false;
  auto presented = authorization.substr(scheme.size());
  bool ok = false;
  for (const auto& k : keys_) ok |= constant_time_equal(presented, k);  // no early exit
  return ok;
}

}  // namespace dls::gateway
