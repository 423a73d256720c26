#pragma once
// Tokenizers behind one interface. The shipped model uses a character vocabulary stored as
// tokenizer.json {"type": "char", "vocab": [...]}; HF tokenizers plug in behind the same class.
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
  virtual int vocab_size() const = 0;
};

class char_tokenizer final : public tokenizer {
 public:
  char_tokenizer(std::vector<std::string> vocab, int32_t eos, int32_t mask, int32_t unk);
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int vocab_size() const override { return static_cast<int>(vocab_.size()); }

 private:
  std::vector<std::string> vocab_;
  std::unordered_map<char, int32_t> index_;
  int32_t eos_, mask_, unk_;
};

/// Loads `dir`/tokenizer.json; throws load_error naming the problem.
std::unique_ptr<tokenizer> load_tokenizer(const std::string& dir);

}  // namespace dls::gpu
