// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others for U+0100 upwards in order.
#include "runtime/data/byte_level.h"

#include <utf8proc.h>

#include <unordered_map>

namespace strata {
namespace {

std::array<std::int32_t, 256> byte_code_points() {
  std::array<std::int32_t, 256> cp{};
  std::int32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cp[b] = printable ? b : next++;
  }
  return cp;
}

}  // namespace

const std::array<std::string, 256>& byte_level_chars() {
  static const std::array<std::string, 256> chars = [] {
    std::array<std::string, 256> out;
    const auto cp = byte_code_points();
    for (int b = 0; b < 256; ++b) {
      utf8proc_uint8_t buf[4];
      const auto n = utf8proc_encode_char(cp[b], buf);
      out[b].assign(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
    }
    return out;
  }();
  return chars;
}

std::optional<std::string> byte_level_decode(std::string_view token) {
  static const std::unordered_map<std::int32_t, char> to_byte = [] {
    std::unordered_map<std::int32_t, char> m;
    const auto cp = byte_code_points();
    for (int b = 0; b < 256; ++b) m.emplace(cp[b], static_cast<char>(b));
    return m;
  }();
  std::string out;
  out.reserve(token.size());
  auto* p = reinterpret_cast<const utf8proc_uint8_t*>(token.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(token.size());
  while (left > 0) {
    utf8proc_int32_t c = 0;
    const auto n = utf8proc_iterate(p, left, &c);
    if (n <= 0) return std::nullopt;
    const auto it = to_byte.find(c);
    if (it == to_byte.end()) return std::nullopt;
    out.push_back(it->second);
    p += n;
    left -= n;
  }
  return out;
}

}  // namespace strata
