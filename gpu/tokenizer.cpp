#include "gpu/tokenizer.hpp"

#include "gpu/hf_tokenizer.hpp"
#include "gpu/safetensors.hpp"

#include <fstream>
#include <sstream>
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

std::string char_tokenizer::token_bytes(int32_t id) const {
  if (id == mask_ || id < 0 || id >= static_cast<int32_t>(vocab_.size()) || vocab_[id].size() != 1) return "?";
  return vocab_[id];
}

std::string incremental_decoder::push(const std::vector<int32_t>& ids) {
  std::string bytes;
  for (auto id : ids) {
    if (ended_) break;
    if (tok_.is_eos(id)) {
      ended_ = true;
      break;
    }
    bytes += tok_.token_bytes(id);
  }
  return bytes_.push(bytes);
}

std::string incremental_decoder::finish() {
  ended_ = true;
  return bytes_.finish();
}

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw load_error(path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json parse_json(const std::string& text, const std::string& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw load_error(path + ": not valid JSON (" + e.what() + ")");
  }
}

// tokenizer_config.json spells a token as a string or as {"content": "..."}.
std::string config_token(const nlohmann::json& cfg, const char* key) {
  if (!cfg.contains(key)) return {};
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return {};
}

}  // namespace

std::unique_ptr<tokenizer> load_tokenizer(const std::string& dir) {
  const std::string text = read_text(dir + "/tokenizer.json");
  const std::string cfg_path = dir + "/tokenizer_config.json";
  if (!std::ifstream(cfg_path)) return parse_tokenizer(text, nullptr, dir);
  const std::string cfg = read_text(cfg_path);
  return parse_tokenizer(text, &cfg, dir);
}

std::unique_ptr<tokenizer> parse_tokenizer(const std::string& tokenizer_json, const std::string* tokenizer_config_json,
                                           const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  const nlohmann::json j = parse_json(tokenizer_json, path);
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
  if (j.contains("model") && j["model"].is_object()) {
    std::string eos;
    if (tokenizer_config_json)
      eos = config_token(parse_json(*tokenizer_config_json, dir + "/tokenizer_config.json"), "eos_token");
    try {
      return std::make_unique<hf_tokenizer>(j, eos, path);
    } catch (const nlohmann::json::exception& e) {
      throw load_error(path + ": unexpected structure (" + e.what() + ")");
    }
  }
  throw load_error(path + ": unknown tokenizer type");
}

}  // namespace dls::gpu
