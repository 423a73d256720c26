#include "gpu/tokenizer.hpp"

#include "gpu/safetensors.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

namespace dls::gpu {

char_tokenizer::char_tokenizer(std::vector<std::string> vocab, int32_t eos, int32_t mask, int32_t unk)
    : vocab_(std::move(vocab)), eos_(eos), mask_(mask), unk_(unk) {
  for (std::size_t i = 0; i < vocab_.size(); ++i)
    if (vocab_[i].size() == 1) index_.emplace(vocab_[i][0], static_cast<int32_t>(i));
}

std::vector<int32_t> char_tokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (char c : text) {
    auto it = index_.find(c);
    ids.push_back(it == index_.end() ? unk_ : it->second);
  }
  return ids;
}

std::string char_tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string s;
  for (auto id : ids) {
    if (id == eos_) break;
    if (id == mask_ || id < 0 || id >= static_cast<int32_t>(vocab_.size()) || vocab_[id].size() != 1)
      s += '?';
    else
      s += vocab_[id];
  }
  return s;
}

std::unique_ptr<tokenizer> load_tokenizer(const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  std::ifstream in(path);
  if (!in) throw load_error(path + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw load_error(path + ": not valid JSON (" + e.what() + ")");
  }
  if (j.contains("type") && j["type"] == "char") {
    if (!j.contains("vocab") || !j["vocab"].is_array()) throw load_error(path + ": char tokenizer lacks a vocab array");
    std::vector<std::string> vocab;
    for (const auto& v : j["vocab"]) {
      if (!v.is_string()) throw load_error(path + ": vocab entries must be strings");
      vocab.push_back(v.get<std::string>());
    }
    auto id = [&](const char* key) {
      if (!j.contains(key) || !j[key].is_number_integer()) throw load_error(path + ": missing integer '" + key + "'");
      auto v = j[key].get<int32_t>();
      if (v < 0 || v >= static_cast<int32_t>(vocab.size())) throw load_error(path + ": '" + key + "' out of range");
      return v;
    };
    return std::make_unique<char_tokenizer>(std::move(vocab), id("eos_id"), id("mask_id"), id("unk_id"));
  }
  if (j.contains("model") && j["model"].is_object())
    throw load_error(path + ": HF '" + j["model"].value("type", std::string("?")) +
                     "' tokenizers are not implemented yet; the engine accepts token ids directly");
  throw load_error(path + ": unknown tokenizer type");
}

}  // namespace dls::gpu
