// dilaserve inspect-model and generate --chat on checkpoint folders made here: a two-shard bf16
// checkpoint with its index and the real Qwen3 tokenizer files, and the shipped tiny model with a
// chat template its character vocabulary can spell.
#define BOOST_TEST_MODULE model_cli
#include <boost/test/unit_test.hpp>

#include "gpu/safetensors.hpp"
#include "reference_files.hpp"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct result {
  int rc;
  std::string out;
};

result run(const std::string& args) {
  const std::string cmd = std::string(DLS_BINARY_DIR) + "/tools/dilaserve " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  BOOST_REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  for (std::size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

struct temp_dir {
  fs::path path = fs::temp_directory_path() / ("dls_model_cli_" + std::to_string(getpid()));
  temp_dir() { fs::create_directories(path); }
  ~temp_dir() { fs::remove_all(path); }
};

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p) << s; }

}  // namespace

BOOST_AUTO_TEST_CASE(inspect_model_reads_a_sharded_checkpoint) {
  temp_dir d;
  const std::string src = DLS_SOURCE_DIR;
  fs::copy_file(src + "/models/tiny-llada/config.json", d.path / "config.json");
  const std::string tok = dls::test::reference_tokenizer_dir("qwen3");
  fs::copy_file(tok + "/tokenizer.json", d.path / "tokenizer.json");
  fs::copy_file(tok + "/tokenizer_config.json", d.path / "tokenizer_config.json");
  std::vector<float> a(6 * 4, 0.5f), b(10, 0.25f);
  dls::gpu::write_safetensors_f32((d.path / "model-00001-of-00002.safetensors").string(), {{"x.weight", {6, 4}}},
                                  {a.data()}, dls::gpu::dtype::bf16);
  dls::gpu::write_safetensors_f32((d.path / "model-00002-of-00002.safetensors").string(), {{"y.weight", {10}}},
                                  {b.data()}, dls::gpu::dtype::bf16);
  json index{{"metadata", {{"total_size", 68}}},
             {"weight_map", {{"x.weight", "model-00001-of-00002.safetensors"}, {"y.weight", "model-00002-of-00002.safetensors"}}}};
  write_text(d.path / "model.safetensors.index.json", index.dump());

  auto r = run("inspect-model " + d.path.string() + " --json");
  BOOST_TEST_INFO(r.out);
  BOOST_REQUIRE_EQUAL(r.rc, 0);
  const json j = json::parse(r.out);
  BOOST_TEST(j["weights"]["shards"].size() == 2u);
  BOOST_TEST(j["weights"]["parameters"].get<int64_t>() == 34);
  BOOST_TEST(j["weights"]["parameters_by_dtype"]["BF16"].get<int64_t>() == 34);
  BOOST_TEST(j["tokenizer"]["kind"].get<std::string>() == "Hugging Face byte-level BPE");
  BOOST_TEST(j["tokenizer"]["chat_template"].get<std::string>() == "chatml");
  BOOST_TEST(j["tokenizer"]["named_tokens"]["eos_token"].get<std::string>() == "<|im_end|>");
  // The tiny model's 47-row embedding cannot take Qwen's ids, and inspect-model says so.
  BOOST_TEST(j["unsupported"].dump().find("embedding has 47 rows") != std::string::npos);

  index["weight_map"]["z.weight"] = "model-00002-of-00002.safetensors";
  write_text(d.path / "model.safetensors.index.json", index.dump());
  r = run("inspect-model " + d.path.string());
  BOOST_TEST(r.rc != 0);
  BOOST_TEST(r.out.find("tensor z.weight is not in model-00002-of-00002.safetensors") != std::string::npos, r.out);

  index["weight_map"]["z.weight"] = "model-00003-of-00002.safetensors";
  write_text(d.path / "model.safetensors.index.json", index.dump());
  r = run("inspect-model " + d.path.string());
  BOOST_TEST(r.rc != 0);
  BOOST_TEST(r.out.find("shard model-00003-of-00002.safetensors is missing") != std::string::npos, r.out);
}

BOOST_AUTO_TEST_CASE(generate_chat_renders_the_checkpoint_template) {
  temp_dir d;
  const std::string src = DLS_SOURCE_DIR;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    fs::copy_file(src + "/models/tiny-llada/" + f, d.path / f);
  const std::string tmpl =
      "{% for m in messages %}{{ m.role[0] }}|{{ m.content }}.{% endfor %}{% if add_generation_prompt %}a|{% endif %}";
  write_text(d.path / "tokenizer_config.json", json{{"chat_template", tmpl}, {"eos_token", "<eos>"}}.dump());

  auto r = run("generate --model " + d.path.string() + " --system x --chat 12+7= --show-prompt");
  BOOST_TEST_INFO(r.out);
  BOOST_REQUIRE_EQUAL(r.rc, 0);
  BOOST_TEST(r.out.rfind("s|x.u|12+7=.a|\n", 0) == 0);
  r = run("generate --model " + d.path.string() + " --chat 12+7= --json");
  BOOST_REQUIRE_EQUAL(r.rc, 0);
  BOOST_TEST(json::parse(r.out)["prompt_tokens"].get<int>() == 10);  // "u|12+7=.a|": one id per character

  write_text(d.path / "tokenizer_config.json", json{{"chat_template", "{% macro m() %}{% endmacro %}"}}.dump());
  r = run("generate --model " + d.path.string() + " --chat hi");
  BOOST_TEST(r.rc != 0);
  BOOST_TEST(r.out.find("statement 'macro' is not supported") != std::string::npos, r.out);
}
