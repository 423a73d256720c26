#pragma once
// A Hugging Face tokenizer.json with a byte-level BPE model: NFC normalization (when the file asks
// for it), added and special tokens matched before anything else, Split pre-tokenizers (PCRE2), BPE
// merges by rank and the ByteLevel decoder. Anything else in the file is refused by name at load.
// Encoding adds no special tokens of its own (the chat template writes BOS and the role headers);
// decoding is lossless (clean_up_tokenization_spaces is not applied).
#include "gpu/tokenizer.hpp"
#include "gpu/tokenizer_bpe.hpp"
#include "gpu/tokenizer_regex.hpp"

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace dls::gpu {

class hf_tokenizer final : public tokenizer {
 public:
  /// `tokenizer_json` is the parsed tokenizer.json; `eos_token` (from tokenizer_config.json, may be
  /// empty) ends decode(). `where` names the file in errors. Throws load_error.
  hf_tokenizer(const nlohmann::json& tokenizer_json, const std::string& eos_token, const std::string& where);

  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  /// Like decode(), but through EOS and every other special token.
  std::string decode_all(const std::vector<int32_t>& ids) const;
  std::string token_bytes(int32_t id) const override;
  bool is_eos(int32_t id) const override { return eos_ids_.count(id) != 0; }
  int vocab_size() const override { return static_cast<int>(id_bytes_.size()); }

  /// The id of an added token or vocab entry spelled `text` (raw text, not byte-level); nullopt if none.
  std::optional<int32_t> token_id(const std::string& text) const;
  /// Added tokens (content, id, special) in file order.
  struct added_token {
    std::string content;
    int32_t id;
    bool special;
  };
  const std::vector<added_token>& added_tokens() const { return added_; }

 private:
  void encode_section(std::string_view text, std::vector<int32_t>& out) const;
  // Longest added token starting at text[pos]: its length and id, or length 0.
  std::pair<std::size_t, int32_t> match_added(std::string_view text, std::size_t pos) const;

  std::unique_ptr<bpe_model> bpe_;
  bool nfc_ = false;
  std::vector<std::unique_ptr<split_regex>> splits_;  // applied in order, each to every piece
  std::vector<std::string> id_bytes_;                  // id -> raw bytes ("" where no token)
  std::unordered_map<std::string, int32_t> by_text_;
  std::vector<added_token> added_;
  std::unordered_set<int32_t> eos_ids_;

  // A byte trie of the added tokens, for leftmost-longest matching.
  struct trie_node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // byte -> node index, sorted
    int32_t token = -1;
  };
  std::vector<trie_node> trie_{1};
  std::array<bool, 256> starts_added_{};
};

}  // namespace dls::gpu
