// checked_mul / checked_add: size arithmetic on user-given numbers that throws instead of wrapping around.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/error.h"

namespace strata {

// The most bytes one process may ask for in one allocation or in total: 2^47 (128 TiB), the user address space of
// x86-64 (4-level paging) and of the GPUs' virtual address space. A size above it can never be allocated, so it is
// refused with the quantity's name before anything is attempted (not as a failed 18-exabyte malloc).
inline constexpr std::uint64_t kMaxAddressableBytes = std::uint64_t{1} << 47;

// a * b, or kInvalidArgument "<what> = a x b overflows <type>" when the product does not fit T. `what` names the
// quantity (e.g. "activation floats (batch x seq x 4 embd)") so the message tells the user which flags to lower.
template <typename T, typename A, typename B>
T checked_mul(A a, B b, const char* what) {
  static_assert(std::is_integral_v<T> && std::is_integral_v<A> && std::is_integral_v<B>, "integers only");
  T out{};
  if (__builtin_mul_overflow(a, b, &out))
    STRATA_THROW(ErrorCode::kInvalidArgument, "{} = {} x {} overflows a {}-bit {} integer", what, a, b,
                 8 * sizeof(T), std::is_signed_v<T> ? "signed" : "unsigned");
  return out;
}

// a + b, or kInvalidArgument as checked_mul.
template <typename T, typename A, typename B>
T checked_add(A a, B b, const char* what) {
  static_assert(std::is_integral_v<T> && std::is_integral_v<A> && std::is_integral_v<B>, "integers only");
  T out{};
  if (__builtin_add_overflow(a, b, &out))
    STRATA_THROW(ErrorCode::kInvalidArgument, "{} = {} + {} overflows a {}-bit {} integer", what, a, b,
                 8 * sizeof(T), std::is_signed_v<T> ? "signed" : "unsigned");
  return out;
}

namespace detail {
template <typename T>
constexpr bool is_negative(T v) {
  if constexpr (std::is_signed_v<T>) return v < 0;
  return false;
}
}  // namespace detail

// The product of all factors as std::uint64_t, checked at every step; a negative factor is an error too.
template <typename... F>
std::uint64_t checked_product(const char* what, F... factors) {
  static_assert((std::is_integral_v<F> && ...), "integers only");
  std::uint64_t out = 1;
  bool bad = false;
  ((bad = bad || detail::is_negative(factors) ||
          __builtin_mul_overflow(out, static_cast<std::uint64_t>(factors), &out)),
   ...);
  if (bad) {
    std::string text;
    ((text += (text.empty() ? "" : " x ") + std::to_string(factors)), ...);
    STRATA_THROW(ErrorCode::kInvalidArgument, "{} = {} {}", what, text,
                 (detail::is_negative(factors) || ...) ? "has a negative factor" : "overflows a 64-bit unsigned integer");
  }
  return out;
}

// Throws kInvalidArgument when `bytes` is above kMaxAddressableBytes, naming `what` and the limit.
inline void check_addressable(std::uint64_t bytes, const char* what) {
  if (bytes > kMaxAddressableBytes)
    STRATA_THROW(ErrorCode::kInvalidArgument,
                 "{} would take {} bytes ({:.3g} TiB), more than any process can address ({} TiB): lower the sizes",
                 what, bytes, static_cast<double>(bytes) / (1ull << 40), kMaxAddressableBytes >> 40);
}

}  // namespace strata
