#include "gateway/output_filter.hpp"

#include <algorithm>

namespace dls::gateway {

output_filter::output_filter(std::vector<std::string> stop, int max_tokens,
                             std::function<std::size_t(const std::string&)> count,
                             std::function<std::string(const std::string&, std::size_t)> cut)
    : stop_(std::move(stop)), max_tokens_(max_tokens), count_(std::move(count)), cut_(std::move(cut)) {}

// Releases all_[emitted_.size(), upto), cut at max_tokens.
std::string output_filter::release(std::size_t upto) {
  if (upto <= emitted_.size()) return {};
  auto candidate = all_.substr(0, upto);
  if (max_tokens_ > 0 && count_(candidate) > static_cast<std::size_t>(max_tokens_)) {
    candidate = cut_(candidate, static_cast<std::size_t>(max_tokens_));
    done_ = true;
    reason_ = "length";
  }
  if (candidate.size() <= emitted_.size()) return {};
  auto out = candidate.substr(emitted_.size());
  emitted_ = candidate;
  return out;
}

std::string output_filter::push(const std::string& piece) {
  if (done_) return {};
  all_ += piece;
  // The earliest stop sequence anywhere in the unreleased text (it may straddle blocks).
  std::size_t from = emitted_.size();
  std::size_t search_from = from;
  for (const auto& s : stop_) search_from = std::min(search_from, from > s.size() ? from - s.size() + 1 : 0);
  std::size_t hit = std::string::npos;
  for (const auto& s : stop_) {
    auto pos = all_.find(s, search_from);
    if (pos != std::string::npos && pos + s.size() > from) hit = std::min(hit, pos);
  }
  if (hit != std::string::npos) {
    auto out = release(std::max(hit, from));
    done_ = true;
    if (reason_ != "length") {
      reason_ = "stop";
      hit_stop_ = true;
    }
    return out;
  }
  // Hold back a tail that is a proper prefix of some stop sequence.
  std::size_t hold = 0;
  for (const auto& s : stop_)
    for (std::size_t k = std::min(s.size() - 1, all_.size()); k > hold; --k)
      if (all_.compare(all_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  return release(all_.size() - std::min(hold, all_.size() - from));
}

std::string output_filter::finish() {
  if (done_) return {};
  auto out = release(all_.size());
  if (!done_) reason_ = "stop";
  done_ = true;
  return out;
}

}  // namespace dls::gateway
