// tokenizer.json (character or Hugging Face byte-level BPE): a bad file must end in load_error. A
// tokenizer it accepts then encodes text (part of the input itself), every id must be in its
// vocabulary, and the ids decode at once and incrementally.
#include "gpu/hf_tokenizer.hpp"
#include "gpu/safetensors.hpp"
#include "gpu/tokenizer.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

// Text to encode: the input's last bytes after a NUL (JSON text holds no raw NUL), else a fixed
// sentence with ASCII, multi-byte UTF-8 and an invalid byte.
constexpr std::size_t max_text_bytes = 256;  // keeps each run fast; BPE cost grows with the text

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  std::string text = "Hello, world! 1234 caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xff end";
  if (auto nul = input.find('\0'); nul != std::string::npos) {
    text = input.substr(nul + 1, max_text_bytes);
    input.resize(nul);
  }
  try {
    const auto tok = dls::gpu::parse_tokenizer(input, nullptr, "fuzz");
    const auto ids = tok->encode(text);
    for (auto id : ids)
      if (id < 0 || id >= tok->vocab_size()) std::abort();  // encode produced an id outside the vocabulary
    if (auto* hf = dynamic_cast<const dls::gpu::hf_tokenizer*>(tok.get())) {
      (void)hf->decode_all(ids);
    }
    (void)tok->decode(ids);
    dls::gpu::incremental_decoder dec(*tok);
    (void)dec.push(ids);
    (void)dec.finish();
  } catch (const dls::gpu::load_error&) {
  }
  return 0;
}
