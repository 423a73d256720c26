#include "gpu/tokenizer_utf8.hpp"

#include "gpu/safetensors.hpp"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/utf8.h>

namespace dls::gpu {

std::string repair_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* s = reinterpret_cast<const uint8_t*>(bytes.data());
  const int32_t n = static_cast<int32_t>(bytes.size());
  int32_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {  // ASCII fast path: most text is mostly ASCII
      out.push_back(static_cast<char>(s[i++]));
      continue;
    }
    const int32_t start = i;
    UChar32 c;
    U8_NEXT_OR_FFFD(s, i, n, c);
    if (c == 0xFFFD)  // an ill-formed subsequence, or a real U+FFFD: the same three bytes out
      out += "\xEF\xBF\xBD";
    else
      out.append(bytes.data() + start, static_cast<std::size_t>(i - start));
  }
  return out;
}

std::string nfc_normalize(std::string_view text) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  if (U_FAILURE(err)) throw load_error(std::string("ICU NFC normalizer unavailable: ") + u_errorName(err));
  icu::StringPiece sp(text.data(), static_cast<int32_t>(text.size()));
  if (nfc->isNormalizedUTF8(sp, err) && U_SUCCESS(err)) return std::string(text);
  err = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  nfc->normalizeUTF8(0, sp, sink, nullptr, err);
  if (U_FAILURE(err)) throw std::runtime_error(std::string("NFC normalization failed: ") + u_errorName(err));
  return out;
}

namespace {

// Whether `tail` (1-3 bytes) is a proper prefix of some well-formed UTF-8 sequence, so that more
// bytes may still complete it. Second-byte ranges are those of Unicode's Table 3-7.
bool incomplete_prefix(std::string_view tail) {
  const auto b = [&](std::size_t k) { return static_cast<uint8_t>(tail[k]); };
  const uint8_t lead = b(0);
  std::size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return false;
  }
  if (tail.size() >= need) return false;
  if (tail.size() >= 2 && (b(1) < lo || b(1) > hi)) return false;
  for (std::size_t k = 2; k < tail.size(); ++k)
    if (b(k) < 0x80 || b(k) > 0xBF) return false;
  return true;
}

}  // namespace

std::string utf8_stream::push(std::string_view bytes) {
  pending_.append(bytes.data(), bytes.size());
  // A sequence is at most 4 bytes, so only the last 3 can be an unfinished one.
  std::size_t keep = 0;
  for (std::size_t k = 1; k <= 3 && k <= pending_.size(); ++k) {
    const auto c = static_cast<uint8_t>(pending_[pending_.size() - k]);
    if (c >= 0xC0) {  // the last lead byte
      if (incomplete_prefix(std::string_view(pending_).substr(pending_.size() - k))) keep = k;
      break;
    }
    if (c < 0x80) break;
  }
  std::string out = repair_utf8(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string utf8_stream::finish() {
  std::string out = repair_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace dls::gpu
