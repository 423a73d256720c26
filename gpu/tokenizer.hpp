#pragma once
// Tokenizers behind one interface. The shipped model uses a character vocabulary stored as
// tokenizer.json {"type": "char", "vocab": [...]}; a Hugging Face byte-level BPE tokenizer.json
// (gpu/hf_tokenizer.hpp) plugs in behind the same class.
#include "gpu/tokenizer_utf8.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace dls::gpu {

class tokenizer {
 public:
  virtual ~tokenizer() = default;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  /// Decodes up to (not including) the first EOS.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  /// The raw bytes of one token: possibly part of a UTF-8 character; empty for an unknown id.
  virtual std::string token_bytes(int32_t id) const = 0;
  virtual bool is_eos(int32_t id) const = 0;
  virtual int vocab_size() const = 0;
};

/// Decodes ids that arrive in blocks (streamed answers): each push() returns the text completed so
/// far, holding back a character whose bytes are split across blocks, and nothing after EOS. The
/// concatenated outputs of push()... and finish() equal decode() of all ids at once.
class incremental_decoder {
 public:
  explicit incremental_decoder(const tokenizer& t) : tok_(t) {}
  std::string push(const std::vector<int32_t>& ids);
  std::string finish();
  bool ended() const { return ended_; }

 private:
  const tokenizer& tok_;
  utf8_stream bytes_;
  bool ended_ = false;
};

class char_tokenizer final : public tokenizer {
 public:
  char_tokenizer(std::vector<std::string> vocab, int32_t eos, int32_t mask, int32_t unk);
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string token_bytes(int32_t id) const override;
  bool is_eos(int32_t id) const override { return id == eos_; }
  int vocab_size() const override { return static_cast<int>(vocab_.size()); }

 private:
  std::vector<std::string> vocab_;
  std::unordered_map<char, int32_t> index_;
  int32_t eos_, mask_, unk_;
};

/// Loads `dir`/tokenizer.json (and, for a Hugging Face one, the eos_token of
/// `dir`/tokenizer_config.json when that file exists); throws load_error naming the problem.
std::unique_ptr<tokenizer> load_tokenizer(const std::string& dir);
/// The same from the files' text: `tokenizer_config_json` is null when that file does not exist;
/// errors name the files as if they were in `dir`.
std::unique_ptr<tokenizer> parse_tokenizer(const std::string& tokenizer_json, const std::string* tokenizer_config_json,
                                           const std::string& dir);

}  // namespace dls::gpu
