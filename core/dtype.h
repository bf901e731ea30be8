// strata::DType (the element types Strata stores and communicates) and f32 <-> bf16 / f16 conversion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace strata {

// f64 is for bookkeeping reductions (norms, loss sums); tensors are f32 / bf16 / f16.
enum class DType : std::uint8_t { kF32, kBF16, kF16, kI32, kI64, kF64 };

std::size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "f32", "bf16", "f16", "i32", "i64", "f64"
DType parse_dtype(const std::string& name);  // accepts the names above; throws kInvalidArgument
bool dtype_is_float(DType t);

// Round-to-nearest-even conversions (NaN stays NaN), as torch.Tensor.to(bfloat16 / float16) does.
inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float bf16_to_f32(std::uint16_t h) {
  std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A bf16 value as stored, typed: what the bf16 overloads of the tensor-parallel pieces take (runtime/tensor), so a
// bf16 buffer is never passed where f32 or f16 is meant.
struct Bf16 {
  std::uint16_t bits = 0;
  static Bf16 from(float f) { return Bf16{f32_to_bf16(f)}; }
  float value() const { return bf16_to_f32(bits); }
};
static_assert(sizeof(Bf16) == 2, "Bf16 is stored as its 16 bits");

// Code written once over f32 and bf16 activations: a value as f32, and an f32 stored as the type (bf16: rounded once).
inline float f32_of(float x) { return x; }
inline float f32_of(Bf16 x) { return x.value(); }
inline void store_f32(float& dst, float v) { dst = v; }
inline void store_f32(Bf16& dst, float v) { dst = Bf16::from(v); }

inline float f16_to_f32(std::uint16_t h) {
  std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);  // inf / NaN
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (mant << 13);  // normal: rebias 15 -> 127
  } else if (mant == 0) {
    u = sign;  // signed zero
  } else {
    // subnormal: value = mant * 2^-24; normalise it.
    int shift = 0;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      ++shift;
    }
    mant &= 0x3ffu;
    u = sign | (static_cast<std::uint32_t>(113 - shift) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline std::uint16_t f32_to_f16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  std::uint32_t sign = (u >> 16) & 0x8000u;
  std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow (>= 65520) -> inf
  if (abs < 0x38800000u) {
    // result is subnormal or zero: value / 2^-24, rounded to nearest even.
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);  // < 2^-25: rounds to zero
    std::uint32_t exp = abs >> 23;
    std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    std::uint32_t shift = 126 - exp;  // 14 + (113 - exp) - 1 ... bits to drop from 24-bit mantissa
    std::uint32_t half = 1u << (shift - 1);
    std::uint32_t rounded = (mant + half - 1 + ((mant >> shift) & 1u)) >> shift;
    return static_cast<std::uint16_t>(sign | rounded);
  }
  // normal: rebias and round the 13 dropped bits to nearest even (a carry may bump the exponent, as it should).
  std::uint32_t v = abs - (112u << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (v >> 13));
}

}  // namespace strata
