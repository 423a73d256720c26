#include "gpu/hf_tokenizer.hpp"

#include "gpu/safetensors.hpp"
#include "gpu/tokenizer_byte_level.hpp"
#include "gpu/tokenizer_utf8.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace dls::gpu {

namespace {

using json = nlohmann::json;

// Ids are dense in real tokenizers (the largest published vocabularies hold about 262k entries); a
// bound 16 times that keeps a corrupt file's id from sizing the id table to gigabytes.
constexpr int64_t max_token_id = int64_t{1} << 22;

// GPT-2's word pattern, which a ByteLevel pre-tokenizer with use_regex=true splits by.
constexpr const char* gpt2_pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string type_of(const json& j) { return j.is_object() ? j.value("type", std::string("?")) : std::string("?"); }

bool flag(const json& j, const char* key) {
  return j.contains(key) && j[key].is_boolean() && j[key].get<bool>();
}

// PCRE2 quoting of a literal split string.
std::string quote(const std::string& s) {
  std::string out = "\\Q";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 2, "\\E") == 0) {
      out += "\\E\\\\E\\Q";
      ++i;
    } else {
      out += s[i];
    }
  }
  return out + "\\E";
}

}  // namespace

hf_tokenizer::hf_tokenizer(const json& j, const std::string& eos_token, const std::string& where) {
  auto fail = [&](const std::string& what) { throw load_error(where + ": " + what); };
  const json& model = j.at("model");
  if (type_of(model) != "BPE")
    fail("model type '" + type_of(model) + "' is not supported (only byte-level BPE)");
  if (flag(model, "byte_fallback")) fail("BPE byte_fallback is not supported");
  if (model.contains("dropout") && !model["dropout"].is_null()) fail("BPE dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty())
      fail(std::string("BPE ") + key + " is not supported");
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail("BPE model lacks a vocab object");
  if (!model.contains("merges") || !model["merges"].is_array()) fail("BPE model lacks a merges array");

  // Normalizer: none, or NFC (alone or in a Sequence).
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const json& n = j["normalizer"];
    std::vector<const json*> parts;
    if (type_of(n) == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array())
      for (const auto& p : n["normalizers"]) parts.push_back(&p);
    else
      parts.push_back(&n);
    for (const json* p : parts) {
      if (type_of(*p) != "NFC") fail("normalizer '" + type_of(*p) + "' is not supported (only NFC)");
      nfc_ = true;
    }
  }

  // Pre-tokenizer: Split (Isolated) and ByteLevel steps, alone or in a Sequence.
  bool byte_level = false;
  if (!j.contains("pre_tokenizer") || j["pre_tokenizer"].is_null()) fail("no pre_tokenizer (a ByteLevel one is required)");
  {
    const json& p = j["pre_tokenizer"];
    std::vector<const json*> steps;
    if (type_of(p) == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array())
      for (const auto& s : p["pretokenizers"]) steps.push_back(&s);
    else
      steps.push_back(&p);
    for (const json* s : steps) {
      const std::string t = type_of(*s);
      if (t == "Split") {
        const std::string behavior = s->value("behavior", std::string("?"));
        if (behavior != "Isolated") fail("Split behavior '" + behavior + "' is not supported (only Isolated)");
        if (flag(*s, "invert")) fail("Split with invert=true is not supported");
        const json& pat = s->contains("pattern") ? (*s)["pattern"] : json();
        if (pat.contains("Regex") && pat["Regex"].is_string())
          splits_.push_back(std::make_unique<split_regex>(pat["Regex"].get<std::string>()));
        else if (pat.contains("String") && pat["String"].is_string())
          splits_.push_back(std::make_unique<split_regex>(quote(pat["String"].get<std::string>())));
        else
          fail("Split pre-tokenizer lacks a Regex or String pattern");
      } else if (t == "ByteLevel") {
        if (flag(*s, "add_prefix_space")) fail("ByteLevel add_prefix_space=true is not supported");
        if (!s->contains("use_regex") || flag(*s, "use_regex")) splits_.push_back(std::make_unique<split_regex>(gpt2_pattern));
        byte_level = true;
      } else {
        fail("pre-tokenizer '" + t + "' is not supported (only Split and ByteLevel)");
      }
    }
  }
  if (!byte_level) fail("only byte-level BPE is supported (no ByteLevel pre-tokenizer)");
  if (!j.contains("decoder") || type_of(j["decoder"]) != "ByteLevel")
    fail("decoder '" + (j.contains("decoder") ? type_of(j["decoder"]) : std::string("none")) +
         "' is not supported (only ByteLevel)");

  // Vocab, as raw bytes.
  std::unordered_map<std::string, int32_t> vocab;
  int32_t max_id = -1;
  for (const auto& [text, idj] : model["vocab"].items()) {
    if (!idj.is_number_integer()) fail("vocab entry '" + text + "' has no integer id");
    const auto id = idj.get<int64_t>();
    if (id < 0 || id >= max_token_id) fail("vocab id " + std::to_string(id) + " out of range");
    auto bytes = byte_level_to_bytes(text);
    if (!bytes) fail("vocab entry '" + text + "' is not in the byte-level alphabet");
    vocab.emplace(*bytes, static_cast<int32_t>(id));
    max_id = std::max(max_id, static_cast<int32_t>(id));
  }
  std::array<int32_t, 256> byte_ids{};
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(std::string(1, static_cast<char>(b)));
    if (it == vocab.end()) fail("vocab lacks the single byte " + std::to_string(b));
    byte_ids[b] = it->second;
  }

  bpe_ = std::make_unique<bpe_model>(byte_ids, flag(model, "ignore_merges"), vocab);
  for (const auto& m : model["merges"]) {
    std::string left, right;
    if (m.is_string()) {  // "left right"; byte-level entries never contain a space
      const auto s = m.get<std::string>();
      const auto sp = s.find(' ');
      if (sp == std::string::npos) fail("merge '" + s + "' is not two tokens");
      left = s.substr(0, sp);
      right = s.substr(sp + 1, s.find(' ', sp + 1) - sp - 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      fail("a merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto lb = byte_level_to_bytes(left), rb = byte_level_to_bytes(right);
    if (!lb || !rb) fail("merge '" + left + " " + right + "' is not in the byte-level alphabet");
    auto li = vocab.find(*lb), ri = vocab.find(*rb), mi = vocab.find(*lb + *rb);
    if (li == vocab.end() || ri == vocab.end() || mi == vocab.end())
      fail("merge '" + left + " " + right + "' uses or makes a token outside the vocab");
    bpe_->add_merge(li->second, ri->second, mi->second);
  }
  bpe_->finish_merges();

  // Added tokens: they override a vocab entry of the same id and are matched before BPE.
  const json empty = json::array();
  const json& added = j.contains("added_tokens") && j["added_tokens"].is_array() ? j["added_tokens"] : empty;
  for (const auto& a : added) {
    if (!a.contains("content") || !a["content"].is_string() || !a.contains("id") || !a["id"].is_number_integer())
      fail("an added token lacks its content or id");
    const std::string content = a["content"].get<std::string>();
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      if (flag(a, key)) fail("added token '" + content + "' has " + key + "=true, which is not supported");
    const auto id = a["id"].get<int64_t>();
    if (id < 0 || id >= max_token_id) fail("added token id " + std::to_string(id) + " out of range");
    if (content.empty()) fail("an added token is empty");
    added_.push_back({content, static_cast<int32_t>(id), flag(a, "special")});
    max_id = std::max(max_id, static_cast<int32_t>(id));
  }

  id_bytes_.assign(static_cast<std::size_t>(max_id + 1), std::string());
  for (const auto& [bytes, id] : vocab) id_bytes_[id] = bytes;
  by_text_ = vocab;
  for (const auto& a : added_) {
    id_bytes_[a.id] = a.content;
    by_text_[a.content] = a.id;
    int32_t node = 0;
    for (char ch : a.content) {
      const auto c = static_cast<uint8_t>(ch);
      auto& kids = trie_[node].children;
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, int32_t{-1}));
      if (it != kids.end() && it->first == c) {
        node = it->second;
      } else {
        const auto next = static_cast<int32_t>(trie_.size());
        kids.insert(it, {c, next});
        trie_.emplace_back();
        node = next;
      }
    }
    trie_[node].token = a.id;
    starts_added_[static_cast<uint8_t>(a.content[0])] = true;
  }

  if (!eos_token.empty()) {
    auto id = token_id(eos_token);
    if (!id) fail("eos_token '" + eos_token + "' is not a token");
    eos_ids_.insert(*id);
  }
}

std::optional<int32_t> hf_tokenizer::token_id(const std::string& text) const {
  auto it = by_text_.find(text);
  if (it == by_text_.end()) return std::nullopt;
  return it->second;
}

std::pair<std::size_t, int32_t> hf_tokenizer::match_added(std::string_view text, std::size_t pos) const {
  std::size_t best_len = 0;
  int32_t best = -1, node = 0;
  for (std::size_t i = pos; i < text.size(); ++i) {
    const auto c = static_cast<uint8_t>(text[i]);
    const auto& kids = trie_[node].children;
    auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(c, int32_t{-1}));
    if (it == kids.end() || it->first != c) break;
    node = it->second;
    if (trie_[node].token >= 0) {
      best_len = i + 1 - pos;
      best = trie_[node].token;
    }
  }
  return {best_len, best};
}

std::vector<int32_t> hf_tokenizer::encode(const std::string& raw) const {
  const std::string text = repair_utf8(raw);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size();) {
    if (!starts_added_[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    auto [len, id] = match_added(text, i);
    if (len == 0) {
      ++i;
      continue;
    }
    encode_section(std::string_view(text).substr(start, i - start), ids);
    ids.push_back(id);
    i += len;
    start = i;
  }
  encode_section(std::string_view(text).substr(start), ids);
  return ids;
}

void hf_tokenizer::encode_section(std::string_view section, std::vector<int32_t>& out) const {
  if (section.empty()) return;
  std::string normalized;
  if (nfc_) {
    normalized = nfc_normalize(section);
    section = normalized;
  }
  std::vector<std::string_view> pieces{section}, next;
  for (const auto& re : splits_) {
    next.clear();
    for (auto p : pieces) re->split(p, next);
    pieces.swap(next);
  }
  for (auto p : pieces) bpe_->encode_word(p, out);
}

std::string hf_tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(id_bytes_.size())) return {};
  return id_bytes_[id];
}

std::string hf_tokenizer::decode(const std::vector<int32_t>& ids) const {
  auto end = std::find_if(ids.begin(), ids.end(), [&](int32_t id) { return is_eos(id); });
  return decode_all(std::vector<int32_t>(ids.begin(), end));
}

std::string hf_tokenizer::decode_all(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (auto id : ids) {
    // Ids the files do not define (a model's padded vocab rows) decode to nothing, as in HF.
    if (id >= 0 && id < static_cast<int32_t>(id_bytes_.size())) bytes += id_bytes_[id];
  }
  return repair_utf8(bytes);
}

}  // namespace dls::gpu
