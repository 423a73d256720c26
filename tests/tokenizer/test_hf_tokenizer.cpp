// The Hugging Face tokenizer's parts on small inputs: UTF-8 repair and streaming, BPE merges by
// rank in both merge formats, added tokens, EOS, the whitespace rule of Split regexes, a clear
// error naming each tokenizer.json feature that is not supported, and (on the real Qwen3 files)
// concurrent encoding.
#define BOOST_TEST_MODULE hf_tokenizer
#include <boost/test/unit_test.hpp>

#include "gpu/hf_tokenizer.hpp"
#include "gpu/safetensors.hpp"
#include "gpu/tokenizer_byte_level.hpp"
#include "gpu/tokenizer_regex.hpp"
#include "gpu/tokenizer_utf8.hpp"

#include "reference_files.hpp"

#include <nlohmann/json.hpp>
#include <random>
#include <thread>

using namespace dls::gpu;
using json = nlohmann::json;

namespace {

const std::string fffd = "\xEF\xBF\xBD";

std::string byte_level(const std::string& raw) {
  std::string out;
  for (unsigned char b : raw) {
    const uint32_t cp = byte_level_alphabet()[b];
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

// A byte-level BPE tokenizer.json: the 256 bytes are ids 0-255; merges make "ab" (256), "abc"
// (257), "  " (258); <s> is added token 300.
json small_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level(std::string(1, static_cast<char>(b)))] = b;
  vocab[byte_level("ab")] = 256;
  vocab[byte_level("abc")] = 257;
  vocab[byte_level("  ")] = 258;
  vocab[byte_level("bc")] = 259;
  return json{
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"}, {"pattern", {{"Regex", R"( ?\p{L}+|\s+(?!\S)|\s+|[^\s\p{L}]+)"}}},
                       {"behavior", "Isolated"}, {"invert", false}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", json::array({{{"id", 300}, {"content", "<s>"}, {"special", true}}})},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab},
        // "a b" outranks "b c", so "abc" becomes ab + c and then abc; with the ranks swapped it would stay a + bc.
        {"merges", json::array({"a b", json::array({byte_level("ab"), "c"}), byte_level(" ") + " " + byte_level(" "), "b c"})}}}};
}

std::string load_message(const json& j) {
  try {
    hf_tokenizer t(j, "", "tokenizer.json");
  } catch (const dls::gpu::load_error& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

BOOST_AUTO_TEST_CASE(repair_replaces_each_maximal_ill_formed_subsequence) {
  BOOST_TEST(repair_utf8("plain ascii") == "plain ascii");
  BOOST_TEST(repair_utf8("\xE4\xBD\xA0\xF0\x9F\x98\x80") == "\xE4\xBD\xA0\xF0\x9F\x98\x80");
  BOOST_TEST(repair_utf8("\xE4\xBD") == fffd);                               // truncated: one subpart
  BOOST_TEST(repair_utf8("\xC0\xAF") == fffd + fffd);                        // overlong: two
  BOOST_TEST(repair_utf8("\xED\xA0\x80") == fffd + fffd + fffd);             // surrogate: three
  BOOST_TEST(repair_utf8("\xF4\x90\x80\x80") == fffd + fffd + fffd + fffd);  // above U+10FFFF
  BOOST_TEST(repair_utf8("a\xFFz") == "a" + fffd + "z");
  BOOST_TEST(repair_utf8(fffd) == fffd);
}

BOOST_AUTO_TEST_CASE(utf8_stream_never_splits_a_character_and_matches_repair) {
  std::mt19937 rng(7);
  const std::string alphabet[] = {"a", "\xC3\xA9", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80", "\x80", "\xC3", "\xE4\xBD",
                                  "\xF0\x9F", "\xFF", "\xED\xA0\x80", " "};
  for (int trial = 0; trial < 5000; ++trial) {
    std::string bytes;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) bytes += alphabet[rng() % std::size(alphabet)];
    utf8_stream s;
    std::string out;
    for (std::size_t i = 0; i < bytes.size();) {
      const std::size_t k = std::min<std::size_t>(1 + rng() % 3, bytes.size() - i);
      const std::string piece = s.push(std::string_view(bytes).substr(i, k));
      BOOST_REQUIRE(repair_utf8(piece) == piece);  // only whole characters come out
      out += piece;
      i += k;
    }
    out += s.finish();
    BOOST_REQUIRE_MESSAGE(out == repair_utf8(bytes), "trial " << trial);
  }
}

BOOST_AUTO_TEST_CASE(bpe_merges_by_rank_in_both_merge_formats) {
  hf_tokenizer t(small_tokenizer(), "", "tokenizer.json");
  // "abc": a+b (rank 0) first, then ab+c (rank 1); "bc" (rank 3) never gets a turn.
  BOOST_TEST((t.encode("abc") == std::vector<int32_t>{257}));
  // "bcab": the lowest-ranked pair first (a b), then b c.
  BOOST_TEST((t.encode("bcab") == std::vector<int32_t>{259, 256}));
  const auto ids = t.encode("abc<s>ab  ");
  BOOST_TEST((ids == std::vector<int32_t>{257, 300, 256, 258}));
  BOOST_TEST(t.decode_all(ids) == "abc<s>ab  ");
  BOOST_TEST(t.vocab_size() == 301);
  BOOST_TEST(t.token_id("<s>").value() == 300);
}

BOOST_AUTO_TEST_CASE(eos_ends_decoding_and_streaming) {
  hf_tokenizer t(small_tokenizer(), "<s>", "tokenizer.json");
  const std::vector<int32_t> ids = {257, 0xE4, 0xBD, 0xA0, 300, 'z'};
  BOOST_TEST(t.decode(ids) == "abc\xE4\xBD\xA0");
  BOOST_TEST(t.decode_all(ids) == "abc\xE4\xBD\xA0<s>z");
  incremental_decoder d(t);
  BOOST_TEST(d.push({257, 0xE4}) == "abc");  // the first byte of 你 waits for the rest
  BOOST_TEST(d.push({0xBD}) == "");
  BOOST_TEST(d.push({0xA0, 300, 'z'}) == "\xE4\xBD\xA0");
  BOOST_TEST(d.ended());
  BOOST_TEST(d.push({'q'}) == "");
  BOOST_TEST(d.finish() == "");
  incremental_decoder cut(t);
  BOOST_TEST(cut.push({'a', 0xE4, 0xBD}) == "a");
  BOOST_TEST(cut.finish() == fffd);  // a stream that ends inside a character
}

BOOST_AUTO_TEST_CASE(split_regexes_use_unicode_white_space) {
  BOOST_TEST(whitespace_as_unicode_property(R"(\s+(?!\S)|[^\s\p{L}]|\\s)") ==
             R"(\p{White_Space}+(?!\P{White_Space})|[^\p{White_Space}\p{L}]|\\s)");
  split_regex re(R"(\s+|\S+)");
  std::vector<std::string_view> pieces;
  re.split("a\xC2\x85" "b\xE1\xA0\x8E" "c", pieces);  // U+0085 is White_Space; U+180E no longer is
  BOOST_TEST(pieces.size() == 3u);
  BOOST_TEST(std::string(pieces[1]) == "\xC2\x85");
  BOOST_TEST(std::string(pieces[2]) == "b\xE1\xA0\x8E" "c");
  pieces.clear();
  split_regex digits(R"(\p{N}{1,3})");
  digits.split("x12345", pieces);
  BOOST_TEST(pieces.size() == 3u);
  BOOST_TEST(std::string(pieces[1]) == "123");
  BOOST_CHECK_THROW(split_regex("(unclosed"), dls::gpu::load_error);
}

BOOST_AUTO_TEST_CASE(unsupported_features_are_refused_by_name) {
  auto with = [](auto edit) {
    json j = small_tokenizer();
    edit(j);
    return load_message(j);
  };
  auto has = [](const std::string& msg, const std::string& word) {
    BOOST_TEST_INFO(msg);
    BOOST_TEST(msg.find(word) != std::string::npos);
  };
  has(with([](json& j) { j["model"]["type"] = "Unigram"; }), "model type 'Unigram'");
  has(with([](json& j) { j["model"]["byte_fallback"] = true; }), "byte_fallback");
  has(with([](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }), "normalizer 'Lowercase'");
  has(with([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }), "pre-tokenizer 'Whitespace'");
  has(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }), "Split behavior 'Removed'");
  has(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(a"}}; }), "does not compile");
  has(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; }), "add_prefix_space");
  has(with([](json& j) { j["decoder"] = {{"type", "Metaspace"}}; }), "decoder 'Metaspace'");
  has(with([](json& j) { j["added_tokens"][0]["lstrip"] = true; }), "lstrip=true");
  has(with([](json& j) { j["model"]["merges"].push_back("q zz"); }), "outside the vocab");
  has(with([](json& j) { j["model"]["vocab"].erase(byte_level("\x01")); }), "single byte 1");
  has(with([](json& j) { j["added_tokens"][0]["id"] = 1 << 30; }), "added token id 1073741824 out of range");
  has(with([](json& j) { j["pre_tokenizer"] = 5; }), "pre-tokenizer '?'");
  BOOST_TEST(with([](json& j) { j["normalizer"] = {{"type", "NFC"}}; }) == "(accepted)");
}

// Workers share one tokenizer: its merged-word cache and regex state must give every thread the
// ids one thread alone gets.
BOOST_AUTO_TEST_CASE(concurrent_encoding_matches_sequential) {
  auto tok = load_tokenizer(dls::test::reference_tokenizer_dir("qwen3"));
  const std::string words[] = {"the", " quick", " 狐狸", " naïve", "\n\n", " 12345", " don't", "🙂", " Zürich", "  ", "<|im_end|>"};
  std::mt19937 rng(3);
  std::vector<std::string> texts(400);
  for (auto& t : texts)
    for (int i = 0, n = 1 + static_cast<int>(rng() % 40); i < n; ++i) t += words[rng() % std::size(words)];
  std::vector<std::vector<int32_t>> want;
  {
    auto fresh = load_tokenizer(dls::test::reference_tokenizer_dir("qwen3"));
    for (const auto& t : texts) want.push_back(fresh->encode(t));
  }
  constexpr int threads = 4;
  std::vector<int> mismatches(threads, 0);
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      for (int rep = 0; rep < 5; ++rep)
        for (std::size_t i = 0; i < texts.size(); ++i) {
          const std::size_t k = (i * 7 + static_cast<std::size_t>(w) * 13) % texts.size();
          if (tok->encode(texts[k]) != want[k]) ++mismatches[w];
        }
    });
  for (auto& t : pool) t.join();
  for (int w = 0; w < threads; ++w) BOOST_TEST(mismatches[w] == 0);
}
