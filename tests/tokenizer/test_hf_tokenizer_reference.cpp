// The real Qwen3 (Dream's vocabulary and regex) and Llama-3 tokenizers, against @lenml/tokenizers
// in Node.js on a deterministic corpus of 20,000 strings (tests/tokenizer/node/corpus.mjs): ids
// must be identical, decoding must match Node's and give back the (repaired, normalized) input,
// and decoding in streamed blocks must give the same text.
#define BOOST_TEST_MODULE hf_tokenizer_reference
#include <boost/test/unit_test.hpp>

#include "gpu/hf_tokenizer.hpp"
#include "reference_files.hpp"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <unistd.h>

using namespace dls;

namespace {

constexpr int corpus_strings = 20000;
constexpr int corpus_seed = 20240601;

std::string from_hex(const std::string& h) {
  std::string out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

std::string ids_text(const std::vector<int32_t>& v) {
  std::ostringstream o;
  for (auto x : v) o << x << ' ';
  return o.str();
}

// Runs the Node reference and returns its JSON lines.
std::vector<nlohmann::json> node_reference(const std::string& family) {
  if (std::system("command -v node >/dev/null 2>&1") != 0)
    throw std::runtime_error("node is not installed: run tools/install-deps.sh");
  const std::string out = "/tmp/dls_tok_ref_" + family + "_" + std::to_string(getpid()) + ".jsonl";
  const std::string cmd = "node " + test::tokenizer_node_dir() + "/reference.mjs " + family + " " +
                          std::to_string(corpus_strings) + " " + std::to_string(corpus_seed) + " > " + out;
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("the Node reference failed: " + cmd);
  std::ifstream in(out);
  std::vector<nlohmann::json> lines;
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(nlohmann::json::parse(l));
  std::remove(out.c_str());
  return lines;
}

void check_family(const std::string& family) {
  const std::string dir = test::reference_tokenizer_dir(family);
  auto base = gpu::load_tokenizer(dir);
  const auto* tok = dynamic_cast<const gpu::hf_tokenizer*>(base.get());
  BOOST_REQUIRE(tok != nullptr);
  const auto ref = node_reference(family);
  BOOST_REQUIRE_EQUAL(ref.size(), static_cast<std::size_t>(corpus_strings));

  std::mt19937 rng(corpus_seed);
  int id_mismatch = 0, decode_mismatch = 0, round_trip_mismatch = 0, stream_mismatch = 0, invalid_inputs = 0;
  std::size_t total_ids = 0;
  for (const auto& r : ref) {
    const std::string bytes = from_hex(r["hex"].get<std::string>());
    if (gpu::repair_utf8(bytes) != bytes) ++invalid_inputs;
    const auto want = r["ids"].get<std::vector<int32_t>>();
    const auto ids = tok->encode(bytes);
    total_ids += ids.size();
    if (ids != want && ++id_mismatch <= 5)
      BOOST_TEST_MESSAGE(family << " ids differ for hex " << r["hex"] << "\n  node: " << ids_text(want)
                                << "\n  ours: " << ids_text(ids));
    const std::string text = tok->decode_all(want);
    if (text != r["decoded"].get<std::string>() && ++decode_mismatch <= 5)
      BOOST_TEST_MESSAGE(family << " decode differs for hex " << r["hex"]);
    if (text != r["expected"].get<std::string>() && ++round_trip_mismatch <= 5)
      BOOST_TEST_MESSAGE(family << " round trip differs for hex " << r["hex"]);

    // Streamed in blocks of 1-4 ids, up to the first EOS, as the runtime sends answers.
    gpu::incremental_decoder stream(*tok);
    std::string streamed;
    for (std::size_t i = 0; i < want.size();) {
      const std::size_t n = std::min<std::size_t>(1 + rng() % 4, want.size() - i);
      streamed += stream.push(std::vector<int32_t>(want.begin() + i, want.begin() + i + n));
      i += n;
    }
    streamed += stream.finish();
    if (streamed != tok->decode(want)) ++stream_mismatch;
  }
  BOOST_TEST_MESSAGE(family << ": " << ref.size() << " strings (" << invalid_inputs << " with invalid UTF-8), "
                            << total_ids << " ids");
  BOOST_TEST(id_mismatch == 0);
  BOOST_TEST(decode_mismatch == 0);
  BOOST_TEST(round_trip_mismatch == 0);
  BOOST_TEST(stream_mismatch == 0);
  BOOST_TEST(invalid_inputs > 0);
}

}  // namespace

BOOST_AUTO_TEST_CASE(qwen3_matches_the_node_reference) { check_family("qwen3"); }

BOOST_AUTO_TEST_CASE(llama3_matches_the_node_reference) { check_family("llama3"); }
