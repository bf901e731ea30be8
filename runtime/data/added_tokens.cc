// Added-token search: candidates indexed by first byte, so text without a token's first byte is one scan.
#include "runtime/data/added_tokens.h"

#include <algorithm>

namespace strata {

void AddedTokens::add(std::string content, std::int32_t id) {
  if (content.empty()) return;
  auto& list = by_first_byte_[static_cast<unsigned char>(content[0])];
  tokens_.push_back(Token{std::move(content), id});
  list.push_back(tokens_.size() - 1);
  std::stable_sort(list.begin(), list.end(),
                   [&](std::size_t a, std::size_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
}

AddedTokens::Match AddedTokens::find(std::string_view text, std::size_t from) const {
  if (!tokens_.empty()) {
    for (std::size_t pos = from; pos < text.size(); ++pos) {
      for (const std::size_t i : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
        const Token& t = tokens_[i];
        if (text.compare(pos, t.content.size(), t.content) == 0) return Match{pos, t.content.size(), t.id};
      }
    }
  }
  return Match{text.size(), 0, -1};
}

}  // namespace strata
