// PCRE2 (8-bit, UTF + UCP) behind RegexSplit; a JIT match when the pattern JIT-compiled, the interpreter otherwise.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "runtime/data/regex_split.h"

#include <pcre2.h>

#include "core/error.h"

namespace strata {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? fmt::format("PCRE2 error {}", code) : std::string(reinterpret_cast<const char*>(buf));
}

struct MatchData {
  pcre2_match_data* data;
  explicit MatchData(const pcre2_code* code) : data(pcre2_match_data_create_from_pattern(code, nullptr)) {
    STRATA_CHECK_CODE(ErrorCode::kOutOfMemory, data != nullptr, "pcre2_match_data_create_from_pattern failed");
  }
  ~MatchData() { pcre2_match_data_free(data); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
};

}  // namespace

struct RegexSplit::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplit::RegexSplit(const std::string& pattern, bool literal, const std::string& origin)
    : compiled_(std::make_unique<Compiled>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0u);
  compiled_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, compiled_->code != nullptr,
                    "{}: pre-tokenizer pattern \"{}\" does not compile with PCRE2 at offset {}: {}", origin, pattern,
                    offset, pcre2_message(error));
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
}

RegexSplit::~RegexSplit() = default;
RegexSplit::RegexSplit(RegexSplit&&) noexcept = default;
RegexSplit& RegexSplit::operator=(RegexSplit&&) noexcept = default;

void RegexSplit::split(std::string_view text, std::vector<std::string_view>* pieces) const {
  const MatchData match(compiled_->code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t gap_start = 0;
  std::size_t at = 0;
  while (at < text.size()) {
    // The subject was checked as UTF-8 by the caller (utf8_runs.h): no second check per match.
    int rc = compiled_->jit
                 ? pcre2_jit_match(compiled_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, match.data, nullptr)
                 : -1;
    if (!compiled_->jit || rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(compiled_->code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, match.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    STRATA_CHECK_CODE(ErrorCode::kInternal, rc >= 0, "pre-tokenizer match failed at byte {} of {}: {}", at, text.size(),
                      pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.data);
    const std::size_t begin = ov[0];
    const std::size_t end = ov[1];
    if (end == begin) {  // an empty match splits nothing: step over one character
      at = begin + 1;
      while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
      continue;
    }
    if (begin > gap_start) pieces->push_back(text.substr(gap_start, begin - gap_start));
    pieces->push_back(text.substr(begin, end - begin));
    gap_start = at = end;
  }
  if (gap_start < text.size()) pieces->push_back(text.substr(gap_start));
}

const char* RegexSplit::gpt2_pattern() {
  return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
}

}  // namespace strata
