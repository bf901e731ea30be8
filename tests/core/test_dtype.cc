// DType tests: sizes and names, and bf16 / f16 conversions checked exhaustively against their definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"

namespace strata {
namespace {

TEST(DType, SizesNamesAndParsing) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI32), 4u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_size(DType::kF64), 8u);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kF64})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_THROW(parse_dtype("f8"), Error);
}

// Every f16 value converts to f32 exactly and back to itself.
TEST(DType, F16RoundTripsEveryValue) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    float f = f16_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << "f16 0x" << std::hex << h;
  }
}

TEST(DType, F16KnownValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);               // rounds up to infinity
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // exactly half the smallest subnormal: ties to even (0)
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: ties to even (2)
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
}

// Midpoints between neighbouring f16 values round to the even one; points just off the midpoint round to nearest.
TEST(DType, F16RoundsToNearestEven) {
  for (std::uint32_t h = 0; h < 0x7bffu; ++h) {
    double lo = f16_to_f32(static_cast<std::uint16_t>(h)), hi = f16_to_f32(static_cast<std::uint16_t>(h + 1));
    float mid = static_cast<float>((lo + hi) / 2);  // exact in f32
    std::uint16_t even = (h % 2 == 0) ? static_cast<std::uint16_t>(h) : static_cast<std::uint16_t>(h + 1);
    ASSERT_EQ(f32_to_f16(mid), even) << "midpoint above 0x" << std::hex << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, 0.0f)), h);
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, 1e9f)), h + 1);
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  for (std::uint32_t h = 0; h < 0x7f7fu; ++h) {
    float lo = bf16_to_f32(static_cast<std::uint16_t>(h)), hi = bf16_to_f32(static_cast<std::uint16_t>(h + 1));
    ASSERT_EQ(f32_to_bf16(lo), h);
    float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
    std::uint16_t even = (h % 2 == 0) ? static_cast<std::uint16_t>(h) : static_cast<std::uint16_t>(h + 1);
    ASSERT_EQ(f32_to_bf16(mid), even) << "midpoint above 0x" << std::hex << h;
  }
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
}

}  // namespace
}  // namespace strata
