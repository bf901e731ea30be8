// flag_checks: CLI11 validators for numeric flags that say in plain words what is allowed, shared by every tool.
//
// CLI11's own PositiveNumber / NonNegativeNumber / Range print "Value 0 not in range 0.000000 to 1797...(309
// digits)" and accept NaN for a "non-negative" double. These parse the text themselves and reject, with the value:
//   --eps: must be a finite number > 0, got 0
//   --layers: must be an integer from 1 to 2147483647, got 0
// (CLI11 puts the flag's name and ": " in front). Header-only, installed beside strata.h for trainers that parse their
// flags with CLI11 (`#include <strata/flag_checks.h>`); strata.h does not include it, so the library needs no CLI11.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>

namespace strata::flags {

namespace detail {

inline std::string number_text(double v) {
  std::string s = std::to_string(v);  // "%f": drop the trailing zeros, and the point when nothing follows it
  if (s.find('.') != std::string::npos) {
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  return s;
}

// The allowed range of an integer flag in words.
inline std::string integer_words(long long lo, long long hi) {
  if (hi == std::numeric_limits<long long>::max()) return "an integer >= " + std::to_string(lo);
  return "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
}

}  // namespace detail

// An integer in [lo, hi] (decimal; no fraction, no exponent). The default hi is the largest int, so a value that
// would not fit the int it is stored in is refused by name rather than by CLI11's conversion error.
inline CLI::Validator integer(long long lo, long long hi = std::numeric_limits<int>::max()) {
  const std::string words = detail::integer_words(lo, hi);
  return CLI::Validator(
      [lo, hi, words](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
          return "must be " + words + ", got " + text;
        return {};
      },
      words, "INTEGER");
}

// A file or directory name, not empty: `--save ''` would otherwise write nothing and say nothing.
inline CLI::Validator path_name() {
  return CLI::Validator(
      [](std::string& text) -> std::string { return text.empty() ? "is an empty path; give a file name" : ""; }, "",
      "PATH");
}

// --recompute as train_gpt and strata-plan take it: the value optional, "--recompute" alone meaning full; an empty
// value ('') is passed on for RecomputePolicy::parse to refuse. `help` names the kinds and the default.
inline CLI::Option* recompute_option(CLI::App& app, std::string& kind, const std::string& help) {
  return app.add_option("--recompute", kind, help)->expected(0, 1)->default_str("full")->option_text("[KIND]");
}

// An unsigned 64-bit integer >= lo (seeds, token counts).
inline CLI::Validator unsigned_integer(std::uint64_t lo = 0) {
  const std::string words = "an integer from " + std::to_string(lo) + " to " +
                            std::to_string(std::numeric_limits<std::uint64_t>::max());
  return CLI::Validator(
      [lo, words](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
        if (!digits || *end != '\0' || errno == ERANGE || v < lo) return "must be " + words + ", got " + text;
        return {};
      },
      words, "INTEGER");
}

// A positive integer (>= 1) that fits an int.
inline CLI::Validator positive_integer() { return integer(1); }
// A non-negative integer (>= 0) that fits an int.
inline CLI::Validator non_negative_integer() { return integer(0); }
// A non-negative integer that fits a 64-bit int (steps).
inline CLI::Validator non_negative_int64() { return integer(0, std::numeric_limits<long long>::max()); }

// The most compute threads one process may ask for (--threads): four per hardware thread of this machine, and at
// least 256. More threads than hardware threads only time-slice the same cores, so 4x leaves room to measure
// oversubscription and the floor keeps a small container usable; far beyond it libgomp fails in its first parallel
// region (100000 threads: a segfault; 40000: its own messages after seconds), so such counts are refused by name.
inline int max_threads() {
  const long long hw = static_cast<long long>(std::thread::hardware_concurrency());
  return static_cast<int>(std::max(256LL, 4 * hw));
}

// A thread count in [1, max_threads()]: "must be an integer from 1 to 256, got 100000". Every tool's --threads.
inline CLI::Validator thread_count() { return integer(1, max_threads()); }

// A finite floating-point number in the range given by lo / hi; lo_open / hi_open exclude the bound. NaN and
// infinities are always refused ("finite").
inline CLI::Validator real(double lo, bool lo_open, double hi = std::numeric_limits<double>::infinity(),
                           bool hi_open = true) {
  std::string words = "a finite number";
  const bool has_hi = std::isfinite(hi);
  if (has_hi && std::isfinite(lo))
    words += std::string(" in ") + (lo_open ? "(" : "[") + detail::number_text(lo) + ", " + detail::number_text(hi) +
             (hi_open ? ")" : "]");
  else if (std::isfinite(lo))
    words += std::string(lo_open ? " > " : " >= ") + detail::number_text(lo);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        const bool parsed = !text.empty() && end != text.c_str() && *end == '\0';
        const bool ok = parsed && std::isfinite(v) && (lo_open ? v > lo : v >= lo) &&
                        (!has_hi || (hi_open ? v < hi : v <= hi));
        if (!ok) return "must be " + words + ", got " + text;
        return {};
      },
      words, "NUMBER");
}

// A finite number > 0.
inline CLI::Validator positive_real() { return real(0.0, true); }
// A finite number >= 0.
inline CLI::Validator non_negative_real() { return real(0.0, false); }

}  // namespace strata::flags
