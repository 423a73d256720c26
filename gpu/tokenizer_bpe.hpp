#pragma once
// Byte-level BPE: a word's bytes start as one symbol each and the adjacent pair with the lowest
// merge rank is merged (leftmost first among equals) until no pair has a merge. Merged words are
// cached, since natural text repeats its words.
#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dls::gpu {

class bpe_model {
 public:
  /// `byte_ids[b]` is the id of the single byte b; merges are added in rank order.
  bpe_model(std::array<int32_t, 256> byte_ids, bool ignore_merges,
            std::unordered_map<std::string, int32_t> vocab);
  void add_merge(int32_t left, int32_t right, int32_t merged);

  /// Appends the ids of one pre-tokenized word (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

 private:
  void merge(std::string_view word, std::vector<int32_t>& out) const;
  struct merge_rule {
    int32_t rank, merged;
  };
  const merge_rule* find(int32_t left, int32_t right) const;

  std::array<int32_t, 256> byte_ids_;
  bool ignore_merges_;
  std::unordered_map<std::string, int32_t> vocab_;  // raw bytes -> id
  std::unordered_map<uint64_t, merge_rule> merges_;

  // Words longer than this are rare and rarely repeat, so they are merged without caching.
  static constexpr std::size_t cache_word_max_bytes = 256;
  // Bound on cached words (about 100 bytes each with their ids): ~25 MiB at most, then restart.
  static constexpr std::size_t cache_max_words = 1 << 18;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace dls::gpu
