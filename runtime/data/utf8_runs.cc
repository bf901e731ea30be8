// Valid and invalid UTF-8 runs through utf8proc_iterate, with an ASCII fast path.
#include "runtime/data/utf8_runs.h"

#include <utf8proc.h>

namespace strata {
namespace {

// Length of the valid character at the start of `text`, or 0 when the first byte begins none.
std::size_t char_length(std::string_view text) {
  if (static_cast<unsigned char>(text[0]) < 0x80) return 1;
  utf8proc_int32_t c = 0;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                  static_cast<utf8proc_ssize_t>(text.size()), &c);
  return n > 0 && utf8proc_codepoint_valid(c) ? static_cast<std::size_t>(n) : 0;
}

}  // namespace

std::size_t valid_utf8_prefix(std::string_view text) {
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t n = char_length(text.substr(at));
    if (n == 0) break;
    at += n;
  }
  return at;
}

std::size_t invalid_utf8_prefix(std::string_view text) {
  std::size_t at = 0;
  while (at < text.size() && char_length(text.substr(at)) == 0) ++at;
  return at;
}

bool is_ascii(std::string_view text) {
  for (const char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

}  // namespace strata
