// The text a TP group streams (actors::answer_text, which feeds each completed block's ids to
// gpu::incremental_decoder) with the real Qwen3 and Llama-3 tokenizers, on text whose characters
// the BPE splits across tokens: every streamed piece is whole characters, however the answer is
// cut into blocks, and the pieces add up to decode() of the whole answer.
#define BOOST_TEST_MODULE streamed_answer
#include <boost/test/unit_test.hpp>

#include "actors/answer_text.hpp"
#include "gpu/tokenizer.hpp"
#include "gpu/tokenizer_utf8.hpp"
#include "reference_files.hpp"

#include <string>
#include <vector>

using namespace dls;

namespace {

// Rare CJK, mathematical letters, emoji with ZWJ and skin tone, flags, combining marks,
// Devanagari and Thai: characters of 2 to 4 bytes that byte-level BPE often spells with more
// than one token each.
const std::vector<std::string> texts = {
    "鼹鼠在𠮷野家吃饭，龘靐齉。",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 𝒶𝓃𝒹 𝓈𝒸𝓇𝒾𝓅𝓉",
    "👩🏽‍🔬 met 🧑🏿‍🤝‍🧑🏻 at 🏳️‍⚧️ and 🇳🇿🇯🇵",
    "Zalgo: Z̴̢̛a̸͚͝l̵̰̈g̶̟͠o̷̧͆ and é vs é",
    "नमस्ते दुनिया, สวัสดีชาวโลก, ꦲꦏ꧀ꦱꦫ",
};

bool whole_characters(const std::string& s) { return gpu::repair_utf8(s) == s; }

// How many token boundaries of `ids` fall inside a character.
int cuts_inside_characters(const gpu::tokenizer& tok, const std::vector<int32_t>& ids) {
  int cuts = 0;
  std::string bytes;
  for (std::size_t i = 0; i + 1 < ids.size(); ++i) {
    bytes += tok.token_bytes(ids[i]);
    if (!whole_characters(bytes)) ++cuts;
  }
  return cuts;
}

void check_family(const std::string& family) {
  auto tok = gpu::load_tokenizer(test::reference_tokenizer_dir(family));
  int cuts = 0;
  for (const auto& text : texts) {
    const auto ids = tok->encode(text);
    cuts += cuts_inside_characters(*tok, ids);
    const auto whole = tok->decode(ids);
    BOOST_TEST_REQUIRE(whole == text);
    // Blocks of every length from 1 to 5 tokens, starting at every offset of the first block.
    for (std::size_t block = 1; block <= 5; ++block)
      for (std::size_t first = 1; first <= block; ++first) {
        actors::answer_text streamed(*tok);
        std::string joined;
        for (std::size_t end = first;; end = std::min(end + block, ids.size())) {
          auto piece = streamed.advance(std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(end)));
          BOOST_TEST(whole_characters(piece), family << " block " << block << " first " << first << " cut at " << end);
          joined += piece;
          if (end == ids.size()) break;
        }
        joined += streamed.finish();
        BOOST_TEST(joined == whole, family << " block " << block << " first " << first);
        BOOST_TEST(streamed.text() == whole);
      }
  }
  // Otherwise the test would not test holding back.
  BOOST_TEST_REQUIRE(cuts >= 10, family << ": only " << cuts << " token boundaries inside a character");
  BOOST_TEST_MESSAGE(family << ": " << cuts << " token boundaries inside a character");
}

}  // namespace

BOOST_AUTO_TEST_CASE(qwen3_streams_whole_characters) { check_family("qwen3"); }
BOOST_AUTO_TEST_CASE(llama3_streams_whole_characters) { check_family("llama3"); }

BOOST_AUTO_TEST_CASE(nothing_after_the_end_of_sequence_is_streamed) {
  auto tok = gpu::load_tokenizer(test::reference_tokenizer_dir("qwen3"));
  // Qwen3's tokenizer_config.json names <|im_end|>: the end of a ChatML turn.
  auto ids = tok->encode("鼹鼠𠮷");
  auto eos = tok->encode("<|im_end|>");
  BOOST_TEST_REQUIRE(eos.size() == 1u);
  BOOST_TEST_REQUIRE(tok->is_eos(eos[0]));
  auto all = ids;
  all.push_back(eos[0]);
  for (auto id : tok->encode("after")) all.push_back(id);
  actors::answer_text streamed(*tok);
  std::string joined;
  for (std::size_t end = 1; end <= all.size(); ++end)
    joined += streamed.advance(std::vector<int32_t>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(end)));
  joined += streamed.finish();
  BOOST_TEST(joined == "鼹鼠𠮷");
}
