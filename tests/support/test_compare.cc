// The tests' distances (compare.h): exact values on finite input, and infinite, never passing a bar, on a NaN or an
// infinity on either side, in any position, and on ranges of different lengths.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "tests/support/compare.h"

namespace strata::test {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(Compare, FiniteValuesGiveTheirDistance) {
  const std::vector<double> want{4.0, -2.0, 1.0}, got{4.0, -2.5, 1.25};
  EXPECT_DOUBLE_EQ(max_abs(got, want), 0.5);
  EXPECT_DOUBLE_EQ(max_rel(got, want), 0.25);
  EXPECT_DOUBLE_EQ(max_abs_over_scale(got, want), 0.5 / 4.0);
  EXPECT_DOUBLE_EQ(rms_rel(got, want), std::sqrt((0.0 + 0.0625 + 0.0625) / 3.0));
  EXPECT_EQ(max_rel(want, want), 0.0);
  EXPECT_EQ(max_rel(std::vector<double>{}, std::vector<double>{}), 0.0);
  EXPECT_EQ(rms_rel(std::vector<double>{}, std::vector<double>{}), 0.0);
  EXPECT_DOUBLE_EQ(max_rel(std::vector<double>{0.5}, std::vector<double>{0.0}, 1.0), 0.5) << "the floor";
  const std::array<float, 2> f{1.0f, 2.0f};
  EXPECT_EQ(max_abs(std::span<const float>(f), std::vector<double>{1.0, 2.0}), 0.0) << "any range type";
}

TEST(Compare, AnyNonFiniteValueIsInfinitelyFar) {
  for (double bad : {kNan, kInf, -kInf}) {
    for (std::size_t at = 0; at < 3; ++at) {
      std::vector<double> want{4.0, -2.0, 1.0}, got = want;
      got[at] = bad;
      SCOPED_TRACE(testing::Message() << bad << " at " << at);
      EXPECT_EQ(max_abs(got, want), kFar);
      EXPECT_EQ(max_rel(got, want), kFar);
      EXPECT_EQ(max_abs_over_scale(got, want), kFar);
      EXPECT_EQ(rms_rel(got, want), kFar);
      EXPECT_EQ(max_rel(want, got), kFar) << "on the reference's side too";
      EXPECT_EQ(max_abs_over_scale(want, got), kFar);
      EXPECT_FALSE(max_rel(got, want) <= 1e30) << "no bar passes";
    }
  }
  EXPECT_EQ(worse(0.0, kNan), kFar);
  EXPECT_EQ(worse(kNan, 0.0), kFar);
  EXPECT_EQ(worse(1.0, 2.0), 2.0);
  EXPECT_EQ(abs_diff(kNan, kNan), kFar);
  EXPECT_EQ(rel_diff(1.0, kInf), kFar);
}

TEST(Compare, RangesOfDifferentLengthsAreInfinitelyFar) {
  const std::vector<double> a{1.0, 2.0}, b{1.0, 2.0, 3.0};
  EXPECT_EQ(max_abs(a, b), kFar);
  EXPECT_EQ(max_rel(b, a), kFar);
  EXPECT_EQ(max_abs_over_scale(a, b), kFar);
  EXPECT_EQ(rms_rel(a, b), kFar);
}

}  // namespace
}  // namespace strata::test
