#include "gpu/tokenizer_regex.hpp"

#include "gpu/safetensors.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

namespace dls::gpu {

std::string whitespace_as_unicode_property(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') out += "\\p{White_Space}";
      else if (next == 'S') out += "\\P{White_Space}";
      else {
        out += '\\';
        out += next;
      }
    } else {
      out += pattern[i];
    }
  }
  return out;
}

namespace {

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// Room for the JIT's backtracking on long inputs (a run of whitespace is one match); the default
// 32 KiB machine stack is too small for megabyte-sized pieces.
constexpr std::size_t jit_stack_start_bytes = 32 * 1024;
constexpr std::size_t jit_stack_max_bytes = 8 * 1024 * 1024;

struct match_state {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ~match_state() {
    if (data) pcre2_match_data_free(data);
    if (context) pcre2_match_context_free(context);
    if (stack) pcre2_jit_stack_free(stack);
  }
};

}  // namespace

split_regex::split_regex(const std::string& pattern) {
  const std::string rewritten = whitespace_as_unicode_property(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (!code)
    throw load_error("pre-tokenizer regex '" + pattern + "' does not compile at offset " +
                     std::to_string(offset) + ": " + pcre2_message(err));
  code_ = code;
  // Without JIT, matching falls back to the interpreter: slower, same results.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
}

split_regex::~split_regex() { pcre2_code_free(as_code(code_)); }

void split_regex::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  thread_local match_state st;
  if (!st.data) {
    st.data = pcre2_match_data_create(1, nullptr);
    st.context = pcre2_match_context_create(nullptr);
    st.stack = pcre2_jit_stack_create(jit_stack_start_bytes, jit_stack_max_bytes, nullptr);
    if (!st.data || !st.context || !st.stack) throw std::bad_alloc();
    pcre2_jit_stack_assign(st.context, nullptr, st.stack);
  }
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0, prev = 0;
  while (pos <= text.size()) {
    int rc = pcre2_match(as_code(code_), subject, text.size(), pos, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw std::runtime_error("pre-tokenizer regex failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const std::size_t b = ov[0], e = ov[1];
    if (b > prev) pieces.push_back(text.substr(prev, b - prev));
    if (e > b) {
      pieces.push_back(text.substr(b, e - b));
      pos = prev = e;
    } else {  // an empty match keeps nothing; step over one character
      prev = b;
      pos = b + 1;
      while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
  if (prev < text.size()) pieces.push_back(text.substr(prev));
}

}  // namespace dls::gpu
