// BpeModel: byte-level BPE's merge ranks and the merge of one word's bytes into token ids, with a cache of words.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace strata {

class BpeModel {
 public:
  struct Merge {
    std::int32_t left;
    std::int32_t right;
    std::int32_t merged;
  };
  // `byte_ids`: the id of each byte's character; `merges` in rank order (first = applied first); with
  // `ignore_merges` (Llama 3), a word that is a whole token of `words` (raw bytes -> id) is that token, unmerged.
  BpeModel(const std::array<std::int32_t, 256>& byte_ids, const std::vector<Merge>& merges, bool ignore_merges,
           std::unordered_map<std::string, std::int32_t> words);

  // Appends the ids of `word` (any bytes): its bytes merged pair by pair, lowest rank first and leftmost first
  // among equals, as Hugging Face's BPE does.
  void encode_word(std::string_view word, std::vector<std::int32_t>* out) const;

 private:
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using WordMap = std::unordered_map<std::string, std::vector<std::int32_t>, StringHash, std::equal_to<>>;
  struct Ranked {
    std::uint32_t rank;
    std::int32_t merged;
  };

  void merge(std::string_view word, std::vector<std::int32_t>* out) const;

  std::array<std::int32_t, 256> byte_ids_;
  std::unordered_map<std::uint64_t, Ranked> ranks_;  // (left << 32 | right) -> rank and merged id
  bool ignore_merges_;
  std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>> words_;
  // Words seen before and their ids; filled up to kCacheWords and then left as it is (Hugging Face's rule).
  static constexpr std::size_t kCacheWords = 16384;
  static constexpr std::size_t kCacheMaxWordBytes = 128;
  mutable std::shared_mutex cache_mutex_;  // shared to look a word up, exclusive to add one
  mutable WordMap cache_;
};

}  // namespace strata
