// FlatOps tests (CPU backend, local to each rank): the host element-wise operations and the host FlatOps against
// hand-computed values for f32 / bf16 / f16 at sizes 0, 1, a prime and a large uneven one; round-to-nearest-even for
// bf16 and f16; non-float dtypes refused; stream order on a communication-like CPU stream.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "core/error.h"
#include "runtime/sharding/flat_ops.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::element;
using test::error_code_of;
using test::fill_verifiable;
using test::runtime;
using test::verifiable_int;

const DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};
// 0, 1, a prime, one past the 4096-element block add_f32_into works in, and a large uneven size.
const std::size_t kSizes[] = {0, 1, 1009, 4097, 100003};

// Host storage for n elements of t.
std::vector<unsigned char> buffer(std::size_t n, DType t) { return std::vector<unsigned char>(n * dtype_size(t)); }

// Verifiable values scaled by 1/8: exact in every float type (at most 4 significant bits), not all integers.
float small_value(int seed, std::size_t i) { return static_cast<float>(verifiable_int(seed, 0, i)) * 0.125f; }

void fill_small(void* dst, std::size_t n, DType t, int seed) {
  for (std::size_t i = 0; i < n; ++i) {
    const float v = small_value(seed, i);
    if (t == DType::kF32)
      std::memcpy(static_cast<char*>(dst) + 4 * i, &v, 4);
    else {
      const std::uint16_t h = t == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
      std::memcpy(static_cast<char*>(dst) + 2 * i, &h, 2);
    }
  }
}

std::uint16_t bits_bf16(float f) {
  std::uint16_t h = 0;
  convert(&f, DType::kF32, &h, DType::kBF16, 1);
  return h;
}
std::uint16_t bits_f16(float f) {
  std::uint16_t h = 0;
  convert(&f, DType::kF32, &h, DType::kF16, 1);
  return h;
}

TEST(FlatOps, ConvertBetweenEveryFloatPair) {
  for (std::size_t n : kSizes)
    for (DType from : kFloatTypes)
      for (DType to : kFloatTypes) {
        SCOPED_TRACE(fmt::format("n {} {} -> {}", n, dtype_name(from), dtype_name(to)));
        auto src = buffer(n, from), dst = buffer(n + 1, to);
        fill_small(src.data(), n, from, 1);
        std::memset(dst.data(), 0x5a, dst.size());  // the element past the end must stay untouched
        convert(src.data(), from, dst.data(), to, n);
        int wrong = 0;
        for (std::size_t i = 0; i < n; ++i) wrong += element(dst.data(), i, to) != small_value(1, i);
        EXPECT_EQ(wrong, 0);
        for (std::size_t b = n * dtype_size(to); b < dst.size(); ++b) EXPECT_EQ(dst[b], 0x5a) << "wrote past n";
      }
}

TEST(FlatOps, ConvertInPlaceWithEqualDtypesIsANoOp) {
  for (DType t : kFloatTypes) {
    auto data = buffer(1009, t);
    fill_small(data.data(), 1009, t, 2);
    const auto before = data;
    convert(data.data(), t, data.data(), t, 1009);
    EXPECT_EQ(data, before) << dtype_name(t);
    auto copy = buffer(1009, t);
    convert(data.data(), t, copy.data(), t, 1009);  // equal dtypes, distinct buffers: a copy
    EXPECT_EQ(copy, before) << dtype_name(t);
  }
}

TEST(FlatOps, Bf16RoundsToNearestEven) {
  const float tiny = std::ldexp(1.0f, -8);  // half a bf16 ulp at 1
  EXPECT_EQ(bits_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bits_bf16(1.0f + tiny), 0x3f80) << "tie: rounds down to the even 1.0";
  EXPECT_EQ(bits_bf16(1.0f + 3 * tiny), 0x3f82) << "tie: rounds up to the even 1 + 2^-6";
  EXPECT_EQ(bits_bf16(1.0f + tiny + std::ldexp(1.0f, -20)), 0x3f81) << "above the tie: rounds up";
  EXPECT_EQ(bits_bf16(1.0f + tiny - std::ldexp(1.0f, -20)), 0x3f80) << "below the tie: rounds down";
  EXPECT_EQ(bits_bf16(-(1.0f + tiny)), 0xbf80);
  EXPECT_EQ(bits_bf16(-0.0f), 0x8000);
  EXPECT_EQ(bits_bf16(std::numeric_limits<float>::max()), 0x7f80) << "overflows to inf";
  EXPECT_EQ(bits_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(bits_bf16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(bits_bf16(-std::nanf("")))));
}

TEST(FlatOps, F16RoundsToNearestEven) {
  const float tiny = std::ldexp(1.0f, -11);  // half an f16 ulp at 1
  EXPECT_EQ(bits_f16(1.0f), 0x3c00);
  EXPECT_EQ(bits_f16(1.0f + tiny), 0x3c00) << "tie: rounds down to the even 1.0";
  EXPECT_EQ(bits_f16(1.0f + 3 * tiny), 0x3c02) << "tie: rounds up to the even 1 + 2^-9";
  EXPECT_EQ(bits_f16(1.0f + tiny + std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(bits_f16(65504.0f), 0x7bff) << "the largest f16";
  EXPECT_EQ(bits_f16(65519.0f), 0x7bff) << "below the tie with 65536 rounds down";
  EXPECT_EQ(bits_f16(65520.0f), 0x7c00) << "the tie rounds to even: inf";
  EXPECT_EQ(bits_f16(-1e6f), 0xfc00);
  EXPECT_EQ(bits_f16(std::ldexp(1.0f, -14)), 0x0400) << "the smallest normal";
  EXPECT_EQ(bits_f16(std::ldexp(1.0f, -24)), 0x0001) << "the smallest subnormal";
  EXPECT_EQ(bits_f16(std::ldexp(1.0f, -25)), 0x0000) << "tie between 0 and the smallest subnormal: 0";
  EXPECT_EQ(bits_f16(std::ldexp(3.0f, -25)), 0x0002) << "tie between subnormals 1 and 2: 2";
  EXPECT_EQ(bits_f16(std::ldexp(5.0f, -25)), 0x0002) << "tie between subnormals 2 and 3: 2";
  EXPECT_EQ(bits_f16(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(bits_f16(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(f16_to_f32(bits_f16(std::nanf("")))));
}

TEST(FlatOps, AccumulateF32FromEveryFloatType) {
  for (std::size_t n : kSizes)
    for (DType t : kFloatTypes) {
      SCOPED_TRACE(fmt::format("n {} from {}", n, dtype_name(t)));
      std::vector<float> dst(n);
      for (std::size_t i = 0; i < n; ++i) dst[i] = small_value(3, i);
      auto src = buffer(n, t);
      fill_verifiable(src.data(), n, t, 4, 0);
      accumulate_f32(dst.data(), src.data(), t, n);
      accumulate_f32(dst.data(), src.data(), t, n);
      int wrong = 0;
      for (std::size_t i = 0; i < n; ++i) wrong += dst[i] != small_value(3, i) + 2.0f * verifiable_int(4, 0, i);
      EXPECT_EQ(wrong, 0);
    }
}

TEST(FlatOps, AddF32IntoRoundsOnce) {
  for (std::size_t n : kSizes)
    for (DType t : kFloatTypes) {
      SCOPED_TRACE(fmt::format("n {} into {}", n, dtype_name(t)));
      auto dst = buffer(n, t);
      fill_verifiable(dst.data(), n, t, 5, 0);
      std::vector<float> src(n);
      for (std::size_t i = 0; i < n; ++i) src[i] = small_value(6, i);
      add_f32_into(dst.data(), t, src.data(), n);
      int wrong = 0;
      for (std::size_t i = 0; i < n; ++i) wrong += element(dst.data(), i, t) != verifiable_int(5, 0, i) + src[i];
      EXPECT_EQ(wrong, 0);
    }
  // 1 + 2^-7 (a bf16) plus 2^-8 is the tie 1 + 3 * 2^-8, which rounds once to the even 1 + 2^-6.
  std::uint16_t h = f32_to_bf16(1.0f + std::ldexp(1.0f, -7));
  const float add = std::ldexp(1.0f, -8);
  add_f32_into(&h, DType::kBF16, &add, 1);
  EXPECT_EQ(h, 0x3f82);
}

TEST(FlatOps, SumSquaresAndScale) {
  for (std::size_t n : kSizes) {
    std::vector<float> x(n);
    double want = 0;
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(verifiable_int(7, 0, i));
      want += x[i] * x[i];  // integers: exact in any order
    }
    EXPECT_EQ(sum_squares(x.data(), n), want) << "n " << n;
    scale_f32(x.data(), n, -0.5f);
    int wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += x[i] != -0.5f * verifiable_int(7, 0, i);
    EXPECT_EQ(wrong, 0) << "n " << n;
  }
  const float with_nan[3] = {1.0f, std::nanf(""), 2.0f};
  EXPECT_TRUE(std::isnan(sum_squares(with_nan, 3)));
  const float with_inf[2] = {1.0f, -std::numeric_limits<float>::infinity()};
  EXPECT_TRUE(std::isinf(sum_squares(with_inf, 2)));
  const float big[2] = {3e30f, 4e30f};  // squares overflow f32, not the double accumulator
  const double big_want = static_cast<double>(big[0]) * big[0] + static_cast<double>(big[1]) * big[1];
  EXPECT_EQ(sum_squares(big, 2), big_want);
  EXPECT_GT(big_want, std::numeric_limits<float>::max());
}

TEST(FlatOps, NonFloatDtypesAreRefused) {
  std::int32_t ints[4] = {1, 2, 3, 4};
  float f[4] = {0, 0, 0, 0};
  for (DType bad : {DType::kI32, DType::kI64, DType::kF64}) {
    SCOPED_TRACE(dtype_name(bad));
    EXPECT_EQ(error_code_of([&] { convert(ints, bad, f, DType::kF32, 4); }), ErrorCode::kInvalidArgument);
    EXPECT_EQ(error_code_of([&] { convert(f, DType::kF32, ints, bad, 1); }), ErrorCode::kInvalidArgument);
    EXPECT_EQ(error_code_of([&] { accumulate_f32(f, ints, bad, 4); }), ErrorCode::kInvalidArgument);
    EXPECT_EQ(error_code_of([&] { add_f32_into(ints, bad, f, 1); }), ErrorCode::kInvalidArgument);
  }
}

// convert() takes float types only, also when both dtypes are the same one and when n is 0.
TEST(FlatOps, ConvertRefusesEqualNonFloatDtypes) {
  std::int32_t a[2] = {1, 2}, b[2] = {0, 0};
  EXPECT_EQ(error_code_of([&] { convert(a, DType::kI32, b, DType::kI32, 2); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { convert(a, DType::kF64, b, DType::kF32, 0); }), ErrorCode::kInvalidArgument);
}

// The FlatOps seam: the same results, in stream order. On a CPU stream other than the compute stream the operations
// run on the stream's thread; a first task that sleeps lets every later one be queued before any runs, and each
// result depends on the one before (a scale moved before the accumulation would change every element).
TEST(FlatOps, HostOpsRunInStreamOrder) {
  const std::size_t n = 1009;
  Device& dev = runtime().device();
  std::unique_ptr<Stream> stream = dev.create_stream("flat_ops_test");
  std::vector<std::unique_ptr<FlatOps>> both;
  both.push_back(create_host_flat_ops());
  both.push_back(create_flat_ops(dev));
  for (const std::unique_ptr<FlatOps>& ops : both) {
    std::vector<float> x(n), acc(n), back(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(verifiable_int(8, 0, i));
      acc[i] = 1.0f;
    }
    auto half = buffer(n, DType::kBF16);
    double sum = 0;
    stream->enqueue_host([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
    ops->convert(x.data(), DType::kF32, half.data(), DType::kBF16, n, *stream);  // half = x
    ops->accumulate_f32(acc.data(), half.data(), DType::kBF16, n, *stream);      // acc = 1 + x
    ops->scale_f32(acc.data(), n, 2.0f, *stream);                                // acc = 2 + 2x
    ops->add_f32_into(half.data(), DType::kBF16, acc.data(), n, *stream);        // half = 2 + 3x
    ops->convert(half.data(), DType::kBF16, back.data(), DType::kF32, n, *stream);
    ops->add_sum_squares(back.data(), n, &sum, *stream);
    ops->add_sum_squares(back.data(), n, &sum, *stream);  // adds: twice the sum
    stream->synchronize();
    double want = 0;
    int wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float v = 2.0f + 3.0f * x[i];
      wrong += acc[i] != 2.0f + 2.0f * x[i];
      wrong += back[i] != v;
      want += 2.0 * v * v;
    }
    EXPECT_EQ(wrong, 0);
    EXPECT_EQ(sum, want);
  }
}

TEST(FlatOps, FailedOpSurfacesAtSynchronizeAndTheStreamRecovers) {
  Device& dev = runtime().device();
  std::unique_ptr<Stream> stream = dev.create_stream("flat_ops_failure");
  std::unique_ptr<FlatOps> ops = create_host_flat_ops();
  std::int32_t ints[2] = {1, 2};
  float f[2] = {5, 6};
  ops->accumulate_f32(f, ints, DType::kI32, 2, *stream);
  ops->scale_f32(f, 2, 2.0f, *stream);  // skipped: the stream failed before it
  EXPECT_EQ(error_code_of([&] { stream->synchronize(); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(f[0], 5.0f) << "a task after the failure ran";
  ops->scale_f32(f, 2, 2.0f, *stream);
  stream->synchronize();
  EXPECT_EQ(f[1], 12.0f);
}

TEST(FlatOps, ComputeStreamOpsRunInline) {
  Device& dev = runtime().device();
  std::unique_ptr<FlatOps> ops = create_flat_ops(dev);
  std::vector<float> x = {1, -2, 3};
  double sum = 0.5;
  ops->scale_f32(x.data(), 3, 3.0f, dev.compute_stream());
  EXPECT_EQ(x, (std::vector<float>{3, -6, 9})) << "the compute stream is the caller: no synchronize needed";
  ops->add_sum_squares(x.data(), 3, &sum, dev.compute_stream());
  EXPECT_EQ(sum, 126.5);
}

}  // namespace
}  // namespace strata
