#pragma once
// GPT-2's byte-level alphabet, used by Hugging Face's ByteLevel pre-tokenizer and decoder: every
// byte is shown as one printable code point, so vocab entries are text. Printable Latin-1 bytes
// stand for themselves; the other 68 map, in byte order, to U+0100 and up.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dls::gpu {

/// byte -> its code point in the byte-level alphabet.
inline const std::array<uint32_t, 256>& byte_level_alphabet() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

/// The raw bytes a byte-level vocab entry stands for; nullopt if `text` is not in the alphabet.
std::optional<std::string> byte_level_to_bytes(std::string_view text);

}  // namespace dls::gpu
