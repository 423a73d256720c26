// Chat with a checkpoint that has a chat template (tokenizer_config.json): the gateway
// renders the whole conversation with it, instead of taking the last user message.
#define BOOST_TEST_MODULE http_chat_template
#include "http_support.hpp"

#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace dls::test;
using json = nlohmann::json;
namespace fs = std::filesystem;

BOOST_AUTO_TEST_CASE(a_checkpoint_template_renders_every_turn) {
  // The shipped model, plus a template that joins the turns' contents: its rendering of
  // a conversation split in two is the eval prompt itself, so the answer is known.
  scratch_dir dir;
  auto model = dir.file("templated-model");
  fs::create_directories(model);
  auto shipped = fs::path(DLS_SOURCE_DIR) / "models" / "tiny-llada";
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "eval.jsonl"})
    fs::create_symlink(shipped / f, fs::path(model) / f);
  std::ofstream(fs::path(model) / "tokenizer_config.json")
      << json{{"chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}"}}.dump();
  ::setenv("DLS_TEST_MODEL_DIR", model.c_str(), 1);
  http_cluster c;

  auto p = eval_problems(1)[0];
  auto expected = reference_answers("local.yaml", {p})[0];
  auto split = p.prompt.size() / 2;
  auto r = c.call("POST", "/v1/chat/completions",
                  json{{"model", "templated-model"},
                       {"messages",
                        {{{"role", "system"}, {"content", p.prompt.substr(0, split)}},
                         {{"role", "user"}, {"content", p.prompt.substr(split)}}}},
                       {"gen_length", p.gen_length}}
                      .dump());
  BOOST_TEST_REQUIRE(r.status == 200, r.body);
  auto j = json::parse(r.body);
  BOOST_TEST(j["choices"][0]["message"]["content"] == expected);
  BOOST_TEST(j["usage"]["prompt_tokens"] == p.prompt.size());
}
