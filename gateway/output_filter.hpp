#pragma once
// Applies OpenAI's `stop` sequences and `max_tokens` to an answer that arrives block by
// block. Text that could still be the start of a stop sequence is held back until the
// next block decides, so a streamed answer and a whole one always end identically.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace dls::gateway {

class output_filter {
 public:
  /// `count` gives the tokens of a text, `cut` its first n tokens; max_tokens 0 = no limit.
  output_filter(std::vector<std::string> stop, int max_tokens, std::function<std::size_t(const std::string&)> count,
                std::function<std::string(const std::string&, std::size_t)> cut);

  /// Takes the next piece of the answer; returns what may be sent now.
  std::string push(const std::string& piece);
  /// The answer is complete: returns what was still held back.
  std::string finish();

  bool done() const { return done_; }  // a stop sequence or max_tokens ended it
  /// "stop" (natural end or a stop sequence) or "length" (max_tokens).
  const std::string& finish_reason() const { return reason_; }
  bool hit_stop() const { return hit_stop_; }  // a stop sequence ended it
  const std::string& text() const { return emitted_; }  // everything released so far
  const std::string& received() const { return all_; }

 private:
  std::string release(std::size_t upto);
  std::vector<std::string> stop_;
  int max_tokens_;
  std::function<std::size_t(const std::string&)> count_;
  std::function<std::string(const std::string&, std::size_t)> cut_;
  std::string all_;      // everything received
  std::string emitted_;  // released prefix of all_ (after cuts)
  bool done_ = false;
  bool hit_stop_ = false;
  std::string reason_ = "stop";
};

}  // namespace dls::gateway
