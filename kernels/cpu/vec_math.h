// exp_f32: a branch-free float exp that compilers vectorize (glibc's expf and tanhf are scalar calls).
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace strata::cpu::detail {

// exp(x) within 2 ulp of the correctly rounded result for normal results (the tests sweep every float in
// [-87.3, 88.7]), including subnormal results down to 0 below about -103.97, +inf above 88.72, NaN for NaN.
// Cody-Waite reduction x = n ln2 + r with |r| <= ln2/2, Cephes' degree-6 expf polynomial for e^r, then 2^n in
// two halves (each a normal float, so the extremes neither overflow nor flush early). Only arithmetic and
// selects: loops over it vectorize (they need -fno-trapping-math, which strata_kernels compiles with, so that the
// compiler may if-convert the range selects).
inline float exp_f32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;              // 1.5 * 2^23: adding it rounds to an integer held in the low bits
  constexpr float kLo = -104.0f, kHi = 88.7228394f;  // below kLo the result is 0, above kHi it is +inf
  const float xc = x < kLo ? kLo : (x > kHi ? kHi : x);
  const float t = xc * kLog2e + kRound;
  const float n = t - kRound;
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);  // n in [-150, 128]
  float r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * (r * r) + r + 1.0f;
  const int32_t n1 = ni >> 1, n2 = ni - n1;  // 2^n = 2^n1 * 2^n2, both in [-75, 64]
  const float y = (er * std::bit_cast<float>((n1 + 127) << 23)) * std::bit_cast<float>((n2 + 127) << 23);
  return x < kLo ? 0.0f : (x > kHi ? std::numeric_limits<float>::infinity() : y);
}

// x rounded to the nearest bf16 (ties to even; NaN stays NaN), as a float: f32_to_bf16 of core/dtype.h, inline.
inline float round_bf16(float x) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::bit_cast<float>(u & 0xffff0000u);
}

}  // namespace strata::cpu::detail
