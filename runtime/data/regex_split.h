// RegexSplit: a pre-tokenizer's split of text into the matches of a pattern and the gaps between them (Hugging Face's
// Split with behavior "Isolated"), through PCRE2 with Unicode properties (UTF + UCP), JIT-compiled where PCRE2 can.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

class RegexSplit {
 public:
  // `pattern` in the Oniguruma syntax tokenizer.json files use (the subset PCRE2 shares: classes, \p{..}, lookahead,
  // (?i:..)); `literal` matches it as plain text. `origin` names the file in a compile error.
  RegexSplit(const std::string& pattern, bool literal, const std::string& origin);
  ~RegexSplit();
  RegexSplit(RegexSplit&&) noexcept;
  RegexSplit& operator=(RegexSplit&&) noexcept;

  // Appends the non-empty pieces of `text` (valid UTF-8) to `pieces`, in order: matches and the gaps between them.
  void split(std::string_view text, std::vector<std::string_view>* pieces) const;

  // GPT-2's pattern, the one ByteLevel's use_regex applies.
  static const char* gpt2_pattern();

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace strata
