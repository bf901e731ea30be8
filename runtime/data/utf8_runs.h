// The split of bytes into maximal runs of valid UTF-8 and of bytes that are not (utf8proc's decoder decides).
#pragma once

#include <cstddef>
#include <string_view>

namespace strata {

// Bytes at the start of `text` that are valid UTF-8 (whole characters; no surrogates, overlong forms or code points
// above U+10FFFF).
std::size_t valid_utf8_prefix(std::string_view text);
// Bytes at the start of `text` that begin no valid character (0 when text starts with one).
std::size_t invalid_utf8_prefix(std::string_view text);
// True when every byte is ASCII (such text is the same in every Unicode normal form).
bool is_ascii(std::string_view text);

}  // namespace strata
