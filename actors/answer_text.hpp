#pragma once
// A request's answer as text while its blocks complete: each completed block's ids are decoded
// once (gpu::incremental_decoder holds back a character split across blocks), instead of the
// whole answer again at every block.
#include "gpu/tokenizer.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dls::actors {

class answer_text {
 public:
  answer_text() = default;
  explicit answer_text(const gpu::tokenizer& tok) : decoder_(std::make_shared<gpu::incremental_decoder>(tok)) {}

  /// `committed`: the answer's committed prefix (it only grows). Returns the text it adds.
  std::string advance(const std::vector<int32_t>& committed) {
    std::string fresh;
    if (decoder_ && committed.size() > ids_done_) {
      fresh = decoder_->push(std::vector<int32_t>(committed.begin() + static_cast<std::ptrdiff_t>(ids_done_),
                                                  committed.end()));
      ids_done_ = committed.size();
    }
    text_ += fresh;
    return fresh;
  }
  /// The answer ended: what the decoder still held back.
  std::string finish() {
    auto rest = decoder_ ? decoder_->finish() : std::string();
    text_ += rest;
    return rest;
  }
  const std::string& text() const { return text_; }

 private:
  std::shared_ptr<gpu::incremental_decoder> decoder_;
  std::size_t ids_done_ = 0;
  std::string text_;
};

}  // namespace dls::actors
