// The chat template parser and renderer: the input is a template's source. A template outside the
// supported Jinja subset must end in template_error when parsed or rendered; one that parses is
// rendered over a fixed conversation, with and without the generation prompt. The conversation is
// tiny, so the render budget is cut to 10,000 units: twice what the real templates need for any
// test conversation (docs/tokenizer.md), and a tenth of the default, so that the many inputs that
// loop until the budget runs out cost the fuzzer a tenth as much and it tries ten times as many.
#include "gpu/chat_template.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace {

const nlohmann::ordered_json& conversation() {
  static const auto m = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "caf\u00e9 \u4f60\u597d"}])");
  return m;
}

const nlohmann::ordered_json& special_tokens() {
  static const auto t = nlohmann::ordered_json::parse(
      R"({"bos_token": "<s>", "eos_token": "</s>", "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::string source(reinterpret_cast<const char*>(data), size);
  try {
    dls::gpu::chat_template t(std::move(source), special_tokens());
    t.set_budget({10'000, 100});
    (void)t.family();
    (void)t.render(conversation(), true);
    (void)t.render(conversation(), false, {{"enable_thinking", false}});
  } catch (const dls::gpu::jinja::template_error&) {
  }
  return 0;
}
