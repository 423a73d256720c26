#pragma once
// UTF-8 handling shared by the tokenizers: repair of ill-formed input, NFC normalization (ICU), and
// an incremental decoder that turns a stream of raw bytes into text without ever splitting a
// character across two outputs.
#include <string>
#include <string_view>

namespace dls::gpu {

/// Replaces each maximal ill-formed subsequence with U+FFFD (Unicode's recommended practice, the
/// rule of the WHATWG Encoding Standard's decoder). Well-formed input comes back unchanged.
std::string repair_utf8(std::string_view bytes);

/// NFC form of well-formed UTF-8 text.
std::string nfc_normalize(std::string_view text);

/// Bytes in, text out, across blocks: push() returns every character completed so far and keeps
/// back a trailing sequence that may still be completed by the next block; finish() ends the
/// stream. The concatenated outputs equal repair_utf8() of the concatenated inputs.
class utf8_stream {
 public:
  std::string push(std::string_view bytes);
  std::string finish();

 private:
  std::string pending_;
};

}  // namespace dls::gpu
