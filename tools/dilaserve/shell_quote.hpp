#pragma once
// One argument quoted for /bin/sh: `up` hands commands to a shell (the link measurement, the
// launch template of a node on another host).
#include <string>

namespace dls::cli {

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace dls::cli
