// swiglu_forward/backward against a double-precision reference and central finite differences, += into gradients,
// extreme gate values (no overflow to NaN), and results bitwise independent of the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/swiglu.h"
#include "tests/kernels/cpu/kernel_test_data.h"
#include "tests/support/compare.h"

namespace strata::cpu {
namespace {

using test::randn;
using test::ScopedThreads;

using Vec = std::vector<double>;

// The header's formula in double: silu(g) = g / (1 + exp(-g)).
double ref_silu(double g) { return g / (1.0 + std::exp(-g)); }

Vec ref_forward(const Vec& gu, int N, int F) {
  Vec out(static_cast<std::size_t>(N) * F);
  for (int n = 0; n < N; ++n)
    for (int f = 0; f < F; ++f) {
      const double g = gu[(2 * n) * F + f], u = gu[(2 * n + 1) * F + f];
      out[n * F + f] = ref_silu(g) * u;
    }
  return out;
}

// Each gradient element's own scale, for a per-element tolerance: |R u| s (1 + |g| (1 - s)) for the gate, the sum
// of the magnitudes of silu' (whose 1 + g (1 - s) cancels near g = -1.28), and |R silu(g)| for the up half.
Vec grad_scale(const Vec& gu, const Vec& R, int N, int F) {
  Vec scale(gu.size());
  for (int n = 0; n < N; ++n)
    for (int f = 0; f < F; ++f) {
      const double g = gu[(2 * n) * F + f], u = gu[(2 * n + 1) * F + f], r = R[n * F + f];
      const double s = 1.0 / (1.0 + std::exp(-g));
      scale[(2 * n) * F + f] = std::fabs(r * u) * s * (1.0 + std::fabs(g) * (1.0 - s));
      scale[(2 * n + 1) * F + f] = std::fabs(r * ref_silu(g));
    }
  return scale;
}

// max_i |(got_i - g0_i) - want_i| / tol_i, with tol_i = rel * scale_i + 2^-22 |got_i| + 1e-9: at most 1 when the
// gradient the kernel added to g0 is within rel of its own scale, beyond the rounding of the += itself and the
// finite differences' own error. Infinite on a NaN.
double grad_err(const std::vector<float>& got, const std::vector<float>& g0, const Vec& want, const Vec& scale,
                double rel) {
  if (got.size() != want.size()) return test::kFar;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tol = rel * scale[i] + 0x1p-22 * std::fabs(got[i]) + 1e-9;
    worst = test::worse(worst, test::abs_diff(static_cast<double>(got[i]) - g0[i], want[i]) / tol);
  }
  return worst;
}

struct Shape {
  int N, F;
};
const Shape kShapes[] = {{0, 5}, {1, 1}, {1, 13}, {3, 7}, {7, 37}, {4, 64}, {5, 67}};

TEST(SwiGlu, ForwardMatchesDoubleReference) {
  for (const Shape& s : kShapes) {
    const auto gu = randn(static_cast<std::size_t>(s.N) * 2 * s.F, 1 + s.F, 3.0f);
    std::vector<float> out(static_cast<std::size_t>(s.N) * s.F, -7.0f);
    swiglu_forward(out.data(), gu.data(), s.N, s.F);
    EXPECT_LE(test::max_rel(out, ref_forward(Vec(gu.begin(), gu.end()), s.N, s.F)), 1e-6)
        << "N=" << s.N << " F=" << s.F;
  }
}

TEST(SwiGlu, BackwardMatchesFiniteDifferencesAndAccumulates) {
  for (const Shape& s : kShapes) {
    const std::size_t NF = static_cast<std::size_t>(s.N) * s.F;
    const auto gu = randn(2 * NF, 11 + s.F, 3.0f), dout = randn(NF, 12 + s.F);
    const auto dgu0 = randn(2 * NF, 13 + s.F);  // nonzero: the backward must add to it
    auto dgu = dgu0;
    swiglu_backward(dgu.data(), dout.data(), gu.data(), s.N, s.F);

    Vec x(gu.begin(), gu.end()), R(dout.begin(), dout.end()), want(x.size());
    auto loss = [&] {
      const Vec out = ref_forward(x, s.N, s.F);
      double l = 0;
      for (std::size_t i = 0; i < out.size(); ++i) l += out[i] * R[i];
      return l;
    };
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double x0 = x[i], h = 1e-5 * std::max(1.0, std::fabs(x0));
      x[i] = x0 + h;
      const double up = loss();
      x[i] = x0 - h;
      const double down = loss();
      x[i] = x0;
      want[i] = (up - down) / (2 * h);
    }
    EXPECT_LE(grad_err(dgu, dgu0, want, grad_scale(x, R, s.N, s.F), 1e-6), 1.0) << "N=" << s.N << " F=" << s.F;
  }
}

// Gates far beyond exp's f32 range: finite results equal to the double reference. Results below f32's normal range
// (silu(-100) = -3.7e-42) are held only to within its smallest normal, so an exp that flushes them to zero passes;
// silu(-90) * 1.5 = -1.1e-37 is normal, and a naive g / (1 + exp(-g)), whose exp(90) overflows to inf, fails there.
TEST(SwiGlu, ExtremeGatesStayFiniteAndCorrect) {
  constexpr double kSubnormalSlack = std::numeric_limits<float>::min();
  const float gates[] = {-1000.0f, -120.0f, -100.0f, -90.0f, -88.0f, -20.0f, -1.278f, -0.0f,
                         0.0f,     1e-30f,  20.0f,   88.0f,  90.0f,  100.0f, 1000.0f};
  const int F = static_cast<int>(std::size(gates));
  std::vector<float> gu(2 * F), dout(F, 1.25f);
  for (int f = 0; f < F; ++f) {
    gu[f] = gates[f];
    gu[F + f] = 1.5f;
  }
  std::vector<float> out(F), dgu(2 * F, 0.0f);
  swiglu_forward(out.data(), gu.data(), 1, F);
  swiglu_backward(dgu.data(), dout.data(), gu.data(), 1, F);
  for (int f = 0; f < F; ++f) {
    const double g = gates[f], s = 1.0 / (1.0 + std::exp(-g));
    const double want_out = ref_silu(g) * 1.5;
    const double want_dg = 1.25 * 1.5 * s * (1.0 + g * (1.0 - s)), want_du = 1.25 * ref_silu(g);
    const double dg_scale = 1.25 * 1.5 * s * (1.0 + std::fabs(g) * (1.0 - s));  // silu' cancels near g = -1.28
    ASSERT_TRUE(std::isfinite(out[f]) && std::isfinite(dgu[f]) && std::isfinite(dgu[F + f])) << "g = " << g;
    EXPECT_LE(std::fabs(out[f] - want_out), 1e-6 * std::fabs(want_out) + kSubnormalSlack) << "g = " << g;
    EXPECT_LE(std::fabs(dgu[f] - want_dg), 1e-6 * dg_scale + kSubnormalSlack) << "g = " << g;
    EXPECT_LE(std::fabs(dgu[F + f] - want_du), 1e-6 * std::fabs(want_du) + kSubnormalSlack) << "g = " << g;
  }
}

TEST(SwiGlu, ResultsDoNotDependOnThreadCount) {
  const int N = 300, F = 100;  // above the size at which the rows are split between threads
  const auto gu = randn(2 * N * F, 31, 3.0f), dout = randn(N * F, 32);
  auto run = [&](int threads) {
    ScopedThreads scope(threads);
    std::vector<float> out(N * F), dgu(2 * N * F, 0.5f);
    swiglu_forward(out.data(), gu.data(), N, F);
    swiglu_backward(dgu.data(), dout.data(), gu.data(), N, F);
    return std::vector<std::vector<float>>{out, dgu};
  };
  const auto one = run(1);
  for (int threads : {2, 3}) {
    const auto many = run(threads);
    for (std::size_t i = 0; i < one.size(); ++i)
      EXPECT_EQ(std::memcmp(one[i].data(), many[i].data(), one[i].size() * sizeof(float)), 0)
          << "output " << i << " (out, dgu) with " << threads << " threads";
  }
}

TEST(SwiGlu, RejectsBadArguments) {
  std::vector<float> buf(16, 1.0f);
  float* p = buf.data();
  EXPECT_THROW(swiglu_forward(p, p, -1, 4), Error);
  EXPECT_THROW(swiglu_forward(p, p, 1, -4), Error);
  EXPECT_THROW(swiglu_backward(p, p, p, -1, 4), Error);
  EXPECT_THROW(swiglu_backward(p, p, p, 1, -4), Error);
}

}  // namespace
}  // namespace strata::cpu
