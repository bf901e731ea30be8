// rmsnorm_forward/backward against a double-precision reference and central finite differences, += into gradients,
// and results bitwise independent of the thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/rmsnorm.h"
#include "tests/kernels/cpu/kernel_test_data.h"
#include "tests/support/compare.h"

namespace strata::cpu {
namespace {

using test::randn;
using test::ScopedThreads;

using Vec = std::vector<double>;

constexpr float kEps = 1e-5f;

// out = x / sqrt(mean(x^2) + eps) * w, all in double; rstd per row when asked.
Vec ref_forward(const Vec& x, const Vec& w, int N, int C, double eps, Vec* rstd = nullptr) {
  Vec out(x.size());
  if (rstd != nullptr) rstd->assign(N, 0.0);
  for (int n = 0; n < N; ++n) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c];
    const double r = 1.0 / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; ++c) out[n * C + c] = x[n * C + c] * r * w[c];
    if (rstd != nullptr) (*rstd)[n] = r;
  }
  return out;
}

// The scalar loss sum(out * R) whose gradients the backward is checked against.
double ref_loss(const Vec& x, const Vec& w, const Vec& R, int N, int C) {
  const Vec out = ref_forward(x, w, N, C, kEps);
  double l = 0;
  for (std::size_t i = 0; i < out.size(); ++i) l += out[i] * R[i];
  return l;
}

// d ref_loss / d v[i] for every i by central differences (v is x or w, perturbed in place and restored).
Vec finite_diff(Vec& v, const std::function<double()>& loss) {
  Vec grad(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double v0 = v[i], h = 1e-5 * std::max(1.0, std::fabs(v0));
    v[i] = v0 + h;
    const double up = loss();
    v[i] = v0 - h;
    const double down = loss();
    v[i] = v0;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

// max_i |(got_i - g0_i) - want_i| / tol_i, with tol_i = rel * scale_i + 2^-22 |got_i| + 1e-9: at most 1 when the
// gradient the kernel added to g0 is within rel of the size of the terms it was formed from (scale_i), beyond the
// rounding of the += itself and the finite differences' own error. Infinite on a NaN.
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

// The size of the terms each gradient element sums, in double: rstd (|g| + |xhat mean(g xhat)|) for dinp, where the
// two cancel (for C = 1 the gradient is ~eps), and sum over rows of |dout xhat| for dweight.
void grad_scales(const Vec& x, const Vec& w, const Vec& R, int N, int C, Vec* dx_scale, Vec* dw_scale) {
  dx_scale->assign(x.size(), 0.0);
  dw_scale->assign(C, 0.0);
  for (int n = 0; n < N; ++n) {
    double ss = 0, gx = 0;
    for (int c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c];
    const double r = 1.0 / std::sqrt(ss / C + kEps);
    for (int c = 0; c < C; ++c) gx += R[n * C + c] * w[c] * x[n * C + c] * r;
    for (int c = 0; c < C; ++c) {
      const double xhat = x[n * C + c] * r;
      (*dx_scale)[n * C + c] = r * (std::fabs(R[n * C + c] * w[c]) + std::fabs(xhat * gx / C));
      (*dw_scale)[c] += std::fabs(R[n * C + c] * xhat);
    }
  }
}

struct Shape {
  int N, C;
};
// N = 0 and 1, a prime C, C below, at and above one 64-channel block of the dweight reduction, none a multiple of 8
// but 64.
const Shape kShapes[] = {{0, 5}, {1, 1}, {1, 13}, {3, 7}, {7, 37}, {4, 64}, {5, 67}, {2, 131}};

TEST(RmsNorm, ForwardMatchesDoubleReference) {
  for (const Shape& s : kShapes) {
    const std::size_t NC = static_cast<std::size_t>(s.N) * s.C;
    auto x = randn(NC, 1 + s.C, 2.5f, 0.3f), w = randn(s.C, 2 + s.C, 0.3f, 1.0f);
    Vec want_rstd;
    const Vec want = ref_forward(Vec(x.begin(), x.end()), Vec(w.begin(), w.end()), s.N, s.C, kEps, &want_rstd);
    std::vector<float> out(NC, -7.0f), rstd(s.N, -7.0f);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), s.N, s.C, kEps);
    EXPECT_LE(test::max_rel(out, want), 1e-6) << "N=" << s.N << " C=" << s.C;
    EXPECT_LE(test::max_rel(rstd, want_rstd), 1e-6) << "N=" << s.N << " C=" << s.C;
  }
}

// eps bounds rstd: a row of zeros gives rstd = 1/sqrt(eps) and zeros out.
TEST(RmsNorm, ZeroRowUsesEps) {
  const int C = 9;
  std::vector<float> x(C, 0.0f), w(C, 2.0f), out(C, 1.0f), rstd(1);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), 1, C, 1e-6f);
  EXPECT_NEAR(rstd[0], 1000.0, 1e-3);
  for (float o : out) EXPECT_EQ(o, 0.0f);
}

TEST(RmsNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  for (const Shape& s : kShapes) {
    const std::size_t NC = static_cast<std::size_t>(s.N) * s.C;
    auto x = randn(NC, 11 + s.C, 2.5f, 0.3f), w = randn(s.C, 12 + s.C, 0.3f, 1.0f), dout = randn(NC, 13 + s.C);
    std::vector<float> out(NC), rstd(s.N);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), s.N, s.C, kEps);
    // Gradients start nonzero: the backward must add to them.
    const auto dx0 = randn(NC, 14 + s.C), dw0 = randn(s.C, 15 + s.C);
    auto dx = dx0, dw = dw0;
    rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), s.N, s.C);

    Vec xd(x.begin(), x.end()), wd(w.begin(), w.end()), R(dout.begin(), dout.end());
    auto loss = [&] { return ref_loss(xd, wd, R, s.N, s.C); };
    const Vec want_dx = finite_diff(xd, loss), want_dw = finite_diff(wd, loss);
    Vec dx_scale, dw_scale;
    grad_scales(xd, wd, R, s.N, s.C, &dx_scale, &dw_scale);
    EXPECT_LE(grad_err(dx, dx0, want_dx, dx_scale, 1e-6), 1.0) << "dinp, N=" << s.N << " C=" << s.C;
    EXPECT_LE(grad_err(dw, dw0, want_dw, dw_scale, 1e-6), 1.0) << "dweight, N=" << s.N << " C=" << s.C;
    if (s.N == 0) {
      EXPECT_EQ(dw, dw0) << "no rows: dweight must be left as it was";
    }
  }
}

// A second backward adds the same gradient again.
TEST(RmsNorm, BackwardAddsTwice) {
  const int N = 6, C = 70;
  auto x = randn(N * C, 21), w = randn(C, 22, 0.3f, 1.0f), dout = randn(N * C, 23);
  std::vector<float> out(N * C), rstd(N), dx_once(N * C, 0.0f), dw_once(C, 0.0f);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  rmsnorm_backward(dx_once.data(), dw_once.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  auto dx = dx_once, dw = dw_once;
  rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  for (int i = 0; i < N * C; ++i) EXPECT_FLOAT_EQ(dx[i], 2 * dx_once[i]) << i;
  for (int c = 0; c < C; ++c) EXPECT_FLOAT_EQ(dw[c], 2 * dw_once[c]) << c;
}

// Many rows, several channel blocks: every output, dweight included, is bitwise the same for 1, 2 and 3 threads.
TEST(RmsNorm, ResultsDoNotDependOnThreadCount) {
  const int N = 301, C = 200;
  auto x = randn(N * C, 31), w = randn(C, 32, 0.3f, 1.0f), dout = randn(N * C, 33);
  auto run = [&](int threads) {
    ScopedThreads scope(threads);
    std::vector<float> out(N * C), rstd(N), dx(N * C, 0.5f), dw(C, 0.25f);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
    rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    return std::vector<std::vector<float>>{out, rstd, dx, dw};
  };
  const auto one = run(1);
  for (int threads : {2, 3}) {
    const auto many = run(threads);
    for (std::size_t i = 0; i < one.size(); ++i)
      EXPECT_EQ(one[i], many[i]) << "output " << i << " (out, rstd, dinp, dweight) with " << threads << " threads";
  }
}

TEST(RmsNorm, RejectsBadArguments) {
  std::vector<float> buf(16, 1.0f);
  float* p = buf.data();
  EXPECT_THROW(rmsnorm_forward(p, p + 8, p, p, -1, 4, kEps), Error);
  EXPECT_THROW(rmsnorm_forward(p, p + 8, p, p, 1, 0, kEps), Error);
  EXPECT_THROW(rmsnorm_forward(p, p + 8, p, p, 1, 4, -1e-5f), Error);
  EXPECT_THROW(rmsnorm_forward(p, p + 8, p, p, 1, 4, std::nanf("")), Error);
  EXPECT_THROW(rmsnorm_backward(p, p, p, p, p, p, -1, 4), Error);
  EXPECT_THROW(rmsnorm_backward(p, p, p, p, p, p, 1, 0), Error);
}

}  // namespace
}  // namespace strata::cpu
