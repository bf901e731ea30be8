// AddedTokens: the added and special tokens of a tokenizer, found in text leftmost-longest before anything else runs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

class AddedTokens {
 public:
  struct Match {
    std::size_t pos;  // text.size() when there is none
    std::size_t len;
    std::int32_t id;
  };

  void add(std::string content, std::int32_t id);
  bool empty() const { return tokens_.empty(); }
  // The leftmost token in `text` at or after `from`, the longest of those that start there.
  Match find(std::string_view text, std::size_t from) const;

 private:
  struct Token {
    std::string content;
    std::int32_t id;
  };
  std::vector<Token> tokens_;
  std::array<std::vector<std::size_t>, 256> by_first_byte_;  // indices into tokens_, longest first
};

}  // namespace strata
