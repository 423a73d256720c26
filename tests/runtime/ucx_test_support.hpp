#pragma once
// What the UCX tests and their peer process share: a worker address as hex on a command line,
// and the data-plane key both seal with (a cluster's head makes a random one).
#include <stdexcept>
#include <string>

namespace dls::test {

inline std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

inline std::string from_hex(const std::string& hex) {
  if (hex.size() % 2) throw std::invalid_argument("odd hex length");
  std::string out;
  for (std::size_t i = 0; i < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

inline std::string test_seal_key() { return std::string(32, '\x5a'); }

}  // namespace dls::test
