#include "gpu/tokenizer_bpe.hpp"

#include "gpu/tokenizer_byte_level.hpp"

#include <algorithm>
#include <functional>
#include <unicode/utf8.h>

namespace dls::gpu {

std::optional<std::string> byte_level_to_bytes(std::string_view text) {
  static const std::unordered_map<uint32_t, uint8_t> inverse = [] {
    std::unordered_map<uint32_t, uint8_t> m;
    const auto& a = byte_level_alphabet();
    for (int b = 0; b < 256; ++b) m.emplace(a[b], static_cast<uint8_t>(b));
    return m;
  }();
  std::string out;
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t n = static_cast<int32_t>(text.size());
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U8_NEXT(s, i, n, c);
    auto it = c < 0 ? inverse.end() : inverse.find(static_cast<uint32_t>(c));
    if (it == inverse.end()) return std::nullopt;
    out.push_back(static_cast<char>(it->second));
  }
  return out;
}

bpe_model::bpe_model(std::array<int32_t, 256> byte_ids, bool ignore_merges,
                     std::unordered_map<std::string, int32_t> vocab)
    : byte_ids_(byte_ids), ignore_merges_(ignore_merges), vocab_(std::move(vocab)) {}

namespace {
uint64_t pair_key(int32_t l, int32_t r) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
}
}  // namespace

void bpe_model::add_merge(int32_t left, int32_t right, int32_t merged) {
  pending_.emplace_back(pair_key(left, right), merge_rule{static_cast<int32_t>(pending_.size()), merged});
}

namespace {
std::size_t slot_of(uint64_t key, int bits) { return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - bits)); }
}  // namespace

void bpe_model::finish_merges() {
  // At most half full, so probes stay short.
  table_bits_ = 4;
  while ((std::size_t{1} << table_bits_) < 2 * pending_.size()) ++table_bits_;
  table_.assign(std::size_t{1} << table_bits_, slot{});
  const std::size_t mask = table_.size() - 1;
  for (const auto& [key, rule] : pending_) {
    std::size_t i = slot_of(key, table_bits_);
    while (table_[i].key != empty_key && table_[i].key != key) i = (i + 1) & mask;
    // A pair listed twice keeps its last rank, as the reference implementations' maps do.
    table_[i] = slot{key, rule};
  }
  pending_.clear();
  pending_.shrink_to_fit();
}

const bpe_model::merge_rule* bpe_model::find(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  const std::size_t mask = table_.size() - 1;
  for (std::size_t i = slot_of(key, table_bits_);; i = (i + 1) & mask) {
    if (table_[i].key == key) return &table_[i].rule;
    if (table_[i].key == empty_key) return nullptr;
  }
}

void bpe_model::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_ || word.size() == 1) {
    auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > cache_word_max_bytes) {
    merge(word, out);
    return;
  }
  std::string key(word);
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = out.size();
  merge(word, out);
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= cache_max_words) cache_.clear();
  cache_.emplace(std::move(key), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
}

void bpe_model::merge(std::string_view word, std::vector<int32_t>& out) const {
  struct symbol {
    int32_t id, prev, next;
  };
  const int32_t n = static_cast<int32_t>(word.size());
  // Per-thread scratch, so that merging a word allocates nothing once warmed up.
  thread_local std::vector<symbol> sym;
  sym.resize(static_cast<std::size_t>(n));
  for (int32_t i = 0; i < n; ++i) sym[i] = {byte_ids_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};

  // (rank, position of the left symbol): the lowest rank first, then the leftmost.
  using candidate = std::pair<int32_t, int32_t>;
  thread_local std::vector<candidate> heap;  // a min-heap through std::greater
  heap.clear();
  auto consider = [&](int32_t left) {
    const int32_t right = sym[left].next;
    if (right < 0) return;
    if (const merge_rule* m = find(sym[left].id, sym[right].id)) {
      heap.emplace_back(m->rank, left);
      std::push_heap(heap.begin(), heap.end(), std::greater<candidate>());
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<candidate>());
    auto [rank, left] = heap.back();
    heap.pop_back();
    if (sym[left].id < 0) continue;
    const int32_t right = sym[left].next;
    if (right < 0) continue;
    const merge_rule* m = find(sym[left].id, sym[right].id);
    if (!m || m->rank != rank) continue;  // stale: one side was merged since
    sym[left].id = m->merged;
    sym[right].id = -1;
    sym[left].next = sym[right].next;
    if (sym[left].next >= 0) sym[sym[left].next].prev = left;
    if (sym[left].prev >= 0) consider(sym[left].prev);
    consider(left);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace dls::gpu
