#pragma once
// A checkpoint's chat template (tokenizer_config.json's "chat_template", a Jinja template),
// rendered as Hugging Face's apply_chat_template renders it: Jinja with trim_blocks and
// lstrip_blocks, the tokenizer's special tokens as variables, and tools/documents set to none.
// The Jinja subset is in gpu/chat_template_syntax.hpp; a template outside it is refused at load
// with a template_error naming the construct.
#include "gpu/chat_template_syntax.hpp"

#include <nlohmann/json.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace dls::gpu {

/// The prompt formats DiLaServe's models use, recognised by their markers.
enum class chat_family { llama3, chatml, other };
const char* to_string(chat_family f);

/// How much work one render may do, in units of one interpreter step or one byte or element an
/// operation touches. Real templates do work linear in the conversation: Qwen3's and Llama-3's
/// need at most 5,000 units plus 11 per input byte (test_chat_template renders them within a
/// fifth of these defaults). A template that does not, such as a nested range()
/// or a string doubled in a loop, fails with a template_error naming the budget instead of hanging
/// or exhausting memory.
struct render_budget {
  int64_t base_units = 100'000;        // for any conversation, even an empty one
  int64_t units_per_input_byte = 100;  // per byte of the messages, variables and special tokens as JSON
};

class chat_template {
 public:
  /// `special_tokens`: bos_token, eos_token, ... as apply_chat_template passes them.
  chat_template(std::string source, nlohmann::ordered_json special_tokens);

  /// Reads `dir`/tokenizer_config.json; throws load_error (no file, no chat_template) or
  /// jinja::template_error (unsupported template).
  static chat_template from_checkpoint(const std::string& dir);

  /// `messages`: [{"role": ..., "content": ...}, ...]. `extra` adds variables (enable_thinking, ...).
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  void set_budget(render_budget b) { budget_ = b; }

  chat_family family() const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  nlohmann::ordered_json special_tokens_;
  std::vector<jinja::node> program_;
  render_budget budget_;
};

/// The special-token variables of a tokenizer_config.json, as apply_chat_template passes them:
/// each of bos/eos/unk/sep/pad/cls/mask_token that is set, and additional_special_tokens.
nlohmann::ordered_json special_token_variables(const nlohmann::ordered_json& tokenizer_config);

}  // namespace dls::gpu
