#pragma once
// The regex of a Hugging Face `Split` pre-tokenizer, compiled with PCRE2 (UTF, Unicode properties,
// JIT). Patterns are written for Oniguruma, whose \s is Unicode White_Space; PCRE2's \s differs
// (it adds U+180E), so \s and \S are rewritten to the White_Space property before compiling.
#include <string>
#include <string_view>
#include <vector>

namespace dls::gpu {

class split_regex {
 public:
  /// Throws load_error naming the pattern and PCRE2's complaint.
  explicit split_regex(const std::string& pattern);
  ~split_regex();
  split_regex(const split_regex&) = delete;
  split_regex& operator=(const split_regex&) = delete;

  /// Appends to `pieces` the "Isolated" split of well-formed UTF-8 `text`: every match, and every
  /// non-empty stretch between matches, in order.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*
};

/// `pattern` with \s and \S spelled as the Unicode White_Space property (outside and inside classes).
std::string whitespace_as_unicode_property(const std::string& pattern);

}  // namespace dls::gpu
