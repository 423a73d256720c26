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
  /// Builds the lookup table; call once after the last add_merge().
  void finish_merges();

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
  // Merges in an open-addressing table (linear probing, power-of-two size, Fibonacci hashing):
  // the merge loop looks a pair up for every candidate, and std::unordered_map's node chasing
  // and modulo were a sixth of encoding time.
  static constexpr uint64_t empty_key = ~uint64_t{0};  // ids are below 2^31, so never a real pair
  struct slot {
    uint64_t key = empty_key;
    merge_rule rule{};
  };
  std::vector<std::pair<uint64_t, merge_rule>> pending_;
  std::vector<slot> table_;
  int table_bits_ = 0;

  // Words longer than this are rare and rarely repeat, so they are merged without caching.
  static constexpr std::size_t cache_word_max_bytes = 256;
  // Bound on cached words (about 100 bytes each with their ids): ~25 MiB at most, then restart.
  static constexpr std::size_t cache_max_words = 1 << 18;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace dls::gpu
