// dilaserve inspect-model DIR: what a checkpoint folder holds (config.json, safetensors shards,
// tokenizer, chat template) and what of it this engine cannot use. Only headers are read: the
// shards are memory-mapped and validated, never loaded, so a 16 GB checkpoint inspects in seconds.
#include "dilaserve/command_registry.hpp"
#include "gpu/chat_template.hpp"
#include "gpu/hf_tokenizer.hpp"
#include "gpu/model_config.hpp"
#include "gpu/safetensors.hpp"
#include "gpu/tokenizer.hpp"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

namespace dls::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

struct inspect_options {
  std::string dir;
  bool json_out = false;
};

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw gpu::load_error(path + ": cannot open");
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    throw gpu::load_error(path + ": not valid JSON (" + e.what() + ")");
  }
}

// The first of `keys` that config.json sets (LLaDA and Hugging Face name the same facts differently).
json first_of(const json& cfg, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (cfg.contains(k) && !cfg[k].is_null()) return cfg[k];
  return nullptr;
}

json inspect_config(const std::string& dir, std::vector<std::string>& unsupported) {
  const std::string path = dir + "/config.json";
  json cfg = read_json_file(path);
  json out;
  out["architecture"] = cfg.contains("architectures") && cfg["architectures"].is_array() && !cfg["architectures"].empty()
                            ? cfg["architectures"][0]
                            : json("(not stated)");
  out["model_type"] = first_of(cfg, {"model_type"});
  out["layers"] = first_of(cfg, {"n_layers", "num_hidden_layers"});
  out["hidden_size"] = first_of(cfg, {"d_model", "hidden_size"});
  out["attention_heads"] = first_of(cfg, {"n_heads", "num_attention_heads"});
  out["kv_heads"] = first_of(cfg, {"n_kv_heads", "num_key_value_heads", "n_heads", "num_attention_heads"});
  out["mlp_hidden_size"] = first_of(cfg, {"mlp_hidden_size", "intermediate_size"});
  out["vocab_size"] = first_of(cfg, {"embedding_size", "vocab_size"});
  out["rope_theta"] = first_of(cfg, {"rope_theta"});
  out["rms_norm_eps"] = first_of(cfg, {"rms_norm_eps"});
  out["tied_head"] = first_of(cfg, {"weight_tying", "tie_word_embeddings"});
  out["config_dtype"] = first_of(cfg, {"torch_dtype"});
  try {
    gpu::load_model_config(path);
  } catch (const gpu::load_error& e) {
    unsupported.push_back(std::string("model: ") + e.what());
  }
  return out;
}

json inspect_weights(const std::string& dir, std::vector<std::string>& unsupported) {
  std::vector<std::string> shards;
  std::map<std::string, std::string> weight_map;
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (fs::exists(index_path)) {
    json index = read_json_file(index_path);
    if (!index.contains("weight_map") || !index["weight_map"].is_object())
      throw gpu::load_error(index_path + ": no weight_map object");
    std::set<std::string> names;
    for (const auto& [tensor, shard] : index["weight_map"].items()) {
      if (!shard.is_string()) throw gpu::load_error(index_path + ": weight_map entry '" + tensor + "' is not a file name");
      weight_map[tensor] = shard.get<std::string>();
      names.insert(shard.get<std::string>());
    }
    shards.assign(names.begin(), names.end());
  } else {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".safetensors") shards.push_back(e.path().filename().string());
    std::sort(shards.begin(), shards.end());
  }
  if (shards.empty()) throw gpu::load_error(dir + ": no *.safetensors files");
  int64_t params = 0;
  std::uintmax_t bytes = 0;
  std::map<std::string, int64_t> by_dtype;
  std::set<std::string> present;
  for (const auto& s : shards) {
    const std::string path = dir + "/" + s;
    if (!fs::exists(path)) throw gpu::load_error(index_path + ": shard " + s + " is missing");
    gpu::safetensors_file f(path);
    bytes += fs::file_size(path);
    for (const auto& [name, t] : f.tensors()) {
      params += t.numel();
      by_dtype[gpu::dtype_name(t.type)] += t.numel();
      present.insert(name);
      auto w = weight_map.find(name);
      if (!weight_map.empty() && (w == weight_map.end() || w->second != s))
        throw gpu::load_error(index_path + ": tensor " + name + " is in " + s + " but the index says otherwise");
    }
  }
  for (const auto& [tensor, shard] : weight_map)
    if (!present.count(tensor)) throw gpu::load_error(index_path + ": tensor " + tensor + " is not in " + shard);
  json out;
  out["shards"] = shards;
  out["bytes"] = bytes;
  out["parameters"] = params;
  json dtypes = json::object();
  for (const auto& [d, n] : by_dtype) dtypes[d] = n;
  out["parameters_by_dtype"] = dtypes;
  (void)unsupported;
  return out;
}

json inspect_tokenizer(const std::string& dir, std::vector<std::string>& unsupported) {
  json out;
  try {
    auto tok = gpu::load_tokenizer(dir);
    out["vocab_size"] = tok->vocab_size();
    if (const auto* hf = dynamic_cast<const gpu::hf_tokenizer*>(tok.get())) {
      out["kind"] = "Hugging Face byte-level BPE";
      json special = json::array();
      for (const auto& a : hf->added_tokens())
        if (a.special) special.push_back(json{{"id", a.id}, {"content", a.content}});
      out["special_tokens"] = special;
    } else {
      out["kind"] = "character vocabulary";
    }
  } catch (const gpu::load_error& e) {
    unsupported.push_back(std::string("tokenizer: ") + e.what());
    out["kind"] = "unusable";
  }
  const std::string cfg_path = dir + "/tokenizer_config.json";
  if (fs::exists(cfg_path)) {
    json cfg = read_json_file(cfg_path);
    out["named_tokens"] = gpu::special_token_variables(cfg);
    try {
      auto t = gpu::chat_template::from_checkpoint(dir);
      out["chat_template"] = gpu::to_string(t.family());
    } catch (const std::exception& e) {
      out["chat_template"] = "unusable";
      unsupported.push_back(std::string("chat template: ") + e.what());
    }
  } else {
    out["chat_template"] = "none (no tokenizer_config.json)";
  }
  return out;
}

void print_text(const json& r) {
  auto str = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  const auto& c = r["config"];
  std::cout << "architecture   " << str(c["architecture"]) << " (model_type " << str(c["model_type"]) << ")\n"
            << "shape          " << str(c["layers"]) << " layers, hidden " << str(c["hidden_size"]) << ", heads "
            << str(c["attention_heads"]) << " (kv " << str(c["kv_heads"]) << "), mlp " << str(c["mlp_hidden_size"])
            << ", vocab " << str(c["vocab_size"]) << "\n"
            << "rope_theta     " << str(c["rope_theta"]) << ", rms_norm_eps " << str(c["rms_norm_eps"])
            << ", tied head " << str(c["tied_head"]) << "\n";
  const auto& w = r["weights"];
  std::cout << "parameters     " << w["parameters"].get<int64_t>() << " (";
  bool first = true;
  for (const auto& [d, n] : w["parameters_by_dtype"].items()) {
    std::cout << (first ? "" : ", ") << d << " " << n.get<int64_t>();
    first = false;
  }
  std::cout << "); config torch_dtype " << str(c["config_dtype"]) << "\n"
            << "shards         " << w["shards"].size() << " file(s), " << w["bytes"].get<std::uintmax_t>() << " bytes:";
  for (const auto& s : w["shards"]) std::cout << " " << s.get<std::string>();
  const auto& t = r["tokenizer"];
  std::cout << "\ntokenizer      " << str(t["kind"]);
  if (t.contains("vocab_size")) std::cout << ", " << t["vocab_size"].get<int>() << " ids";
  if (t.contains("special_tokens")) std::cout << ", " << t["special_tokens"].size() << " special tokens";
  std::cout << "\n";
  if (t.contains("named_tokens"))
    for (const auto& [k, v] : t["named_tokens"].items())
      if (v.is_string()) std::cout << "  " << k << " " << v.get<std::string>() << "\n";
  std::cout << "chat template  " << str(t["chat_template"]) << "\n";
  if (r["unsupported"].empty()) {
    std::cout << "engine         config.json, tokenizer and chat template accepted (weights checked by header only)\n";
  } else {
    std::cout << "not supported by this engine:\n";
    for (const auto& u : r["unsupported"]) std::cout << "  - " << u.get<std::string>() << "\n";
  }
}

int run_inspect(const inspect_options& o) {
  if (!fs::is_directory(o.dir)) throw std::invalid_argument(o.dir + ": not a directory");
  std::vector<std::string> unsupported;
  json r;
  r["config"] = inspect_config(o.dir, unsupported);
  r["weights"] = inspect_weights(o.dir, unsupported);
  r["tokenizer"] = inspect_tokenizer(o.dir, unsupported);
  const json& model_vocab = r["config"]["vocab_size"];
  if (r["tokenizer"].contains("vocab_size") && model_vocab.is_number_integer() &&
      r["tokenizer"]["vocab_size"].get<int64_t>() > model_vocab.get<int64_t>())
    unsupported.push_back("tokenizer: its ids reach " + std::to_string(r["tokenizer"]["vocab_size"].get<int64_t>() - 1) +
                          " but the model's embedding has " + std::to_string(model_vocab.get<int64_t>()) + " rows");
  r["unsupported"] = unsupported;
  if (o.json_out) std::cout << r.dump() << "\n";
  else print_text(r);
  return 0;
}

register_command reg{"inspect-model", [](CLI::App& app) {
  auto* sub = app.add_subcommand("inspect-model", "describe a checkpoint folder and what this engine cannot use of it");
  auto o = std::make_shared<inspect_options>();
  sub->add_option("dir", o->dir, "checkpoint folder (config.json, *.safetensors, tokenizer files)")->required();
  sub->add_flag("--json", o->json_out, "print one JSON object");
  return std::function<int()>([o] { return run_inspect(*o); });
}};

}  // namespace
}  // namespace dls::cli
