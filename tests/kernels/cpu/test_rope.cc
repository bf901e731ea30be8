// RoPE on the CPU: inverse frequencies (plain and Llama 3 scaled) against Hugging Face's formula written out here and
// against literal Llama 3.1 values, the cos/sin table, the rotation against a double reference, its transpose against
// finite differences, start positions, strided views of packed rows, and thread counts.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <numbers>
#include <random>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/rope.h"
#include "tests/kernels/cpu/kernel_test_data.h"
#include "tests/support/compare.h"

namespace strata::cpu {
namespace {

using test::randn;
using test::ScopedThreads;

using Vec = std::vector<double>;

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

RopeScaling llama3(double factor, double low, double high, int original) {
  RopeScaling s;
  s.kind = RopeScaling::kLlama3;
  s.factor = factor;
  s.low_freq_factor = low;
  s.high_freq_factor = high;
  s.original_max_position_embeddings = original;
  return s;
}
const RopeScaling kLlama31 = llama3(8.0, 1.0, 4.0, 8192);  // Llama 3.1's config.json rope_scaling
const RopeScaling kNoScaling{};

// Hugging Face's _compute_default_rope_parameters then _compute_llama3_parameters, written out as HF writes them
// (whole-vector torch.where masks), independently of the kernel's code.
Vec hf_inv_freq(int D, double theta, const RopeScaling& sc) {
  const int n = D / 2;
  Vec inv(n);
  for (int i = 0; i < n; ++i) inv[i] = 1.0 / std::pow(theta, (2.0 * i) / D);  // 1 / base^(arange(0, dim, 2) / dim)
  if (sc.kind != RopeScaling::kLlama3) return inv;
  const double old_context_len = sc.original_max_position_embeddings;
  const double low_freq_wavelen = old_context_len / sc.low_freq_factor;
  const double high_freq_wavelen = old_context_len / sc.high_freq_factor;
  Vec out(n);
  for (int i = 0; i < n; ++i) {
    const double wavelen = 2 * std::numbers::pi / inv[i];
    const double inv_freq_llama = wavelen > low_freq_wavelen ? inv[i] / sc.factor : inv[i];
    const double smooth_factor =
        (old_context_len / wavelen - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor);
    const double smoothed = (1 - smooth_factor) * inv_freq_llama / sc.factor + smooth_factor * inv_freq_llama;
    const bool is_medium_freq = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    out[i] = is_medium_freq ? smoothed : inv_freq_llama;
  }
  return out;
}

Vec kernel_inv_freq(int D, double theta, const RopeScaling& sc) {
  Vec inv(D / 2, -1.0);
  rope_inv_freq(inv.data(), D, theta, sc);
  return inv;
}

// Rotates x (contiguous [B*T, heads*D]) in double with the kernel's f32 table, as the header's formula says;
// sign -1 rotates backwards.
Vec ref_rotate(const Vec& x, const std::vector<float>& cos, const std::vector<float>& sin, int rows_per_batch, int rows,
               int heads, int D, int pos0, double sign = 1.0) {
  Vec out(x.size());
  const int half = D / 2;
  for (int r = 0; r < rows; ++r) {
    const int p = pos0 + r % rows_per_batch;
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < half; ++i) {
        const std::size_t lo = (static_cast<std::size_t>(r) * heads + h) * D + i, hi = lo + half;
        const double c = cos[p * half + i], s = sign * sin[p * half + i];
        out[lo] = x[lo] * c - x[hi] * s;
        out[hi] = x[hi] * c + x[lo] * s;
      }
  }
  return out;
}

// max over pairs of |got - want| / (|x_lo| + |x_hi|): each output's error against the size of the pair it mixes.
double pair_err(const std::vector<float>& got, const Vec& want, const std::vector<float>& x, int D) {
  double worst = 0;
  const int half = D / 2;
  for (std::size_t k = 0; k < x.size(); ++k) {
    const std::size_t base = k - k % D, i = k % D % half;
    const double scale = std::fabs(x[base + i]) + std::fabs(x[base + i + half]) + 1e-30;
    worst = test::worse(worst, test::abs_diff(got[k], want[k]) / scale);
  }
  return worst;
}

// ---- inverse frequencies and the table ----------------------------------------------------------------------

TEST(Rope, PlainInvFreqIsThetaToTheMinus2iOverD) {
  for (int D : {2, 6, 64, 128})
    for (double theta : {10000.0, 500000.0}) {
      const Vec got = kernel_inv_freq(D, theta, kNoScaling);
      EXPECT_LE(test::max_rel(got, hf_inv_freq(D, theta, kNoScaling)), 1e-14) << "D=" << D << " theta=" << theta;
      EXPECT_EQ(got[0], 1.0);
    }
  EXPECT_NEAR(kernel_inv_freq(64, 10000.0, kNoScaling)[16], 0.01, 1e-17);  // 10000^(-32/64)
}

TEST(Rope, Llama3InvFreqMatchesHfFormula) {
  struct Case {
    int D;
    double theta;
    RopeScaling scaling;
  };
  const Case cases[] = {
      {128, 500000.0, kLlama31},                     // Llama 3.1 8B/70B/405B
      {64, 500000.0, llama3(32.0, 1.0, 4.0, 8192)},  // Llama 3.2 1B
      {96, 10000.0, llama3(4.0, 2.0, 8.0, 2048)},    // made up: other factors, D not a power of 2
  };
  for (const Case& c : cases) {
    const Vec want = hf_inv_freq(c.D, c.theta, c.scaling), plain = hf_inv_freq(c.D, c.theta, kNoScaling);
    EXPECT_LE(test::max_rel(kernel_inv_freq(c.D, c.theta, c.scaling), want), 1e-14) << "D=" << c.D;
    // The case reaches all three bands: kept, divided by factor, smoothed in between.
    int kept = 0, divided = 0, smoothed = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (want[i] == plain[i])
        ++kept;
      else if (std::fabs(want[i] - plain[i] / c.scaling.factor) <= 1e-15 * plain[i])
        ++divided;
      else
        ++smoothed;
    }
    EXPECT_GT(kept, 0) << "D=" << c.D;
    EXPECT_GT(divided, 0) << "D=" << c.D;
    EXPECT_GT(smoothed, 0) << "D=" << c.D;
  }
}

// Llama 3.1 (theta 500000, factor 8, low 1, high 4, original 8192, D = 128), computed with Python's math module:
//   inv = 1.0 / 500000.0 ** ((2 * i) / 128); w = 2 * math.pi / inv
//   r = inv if w < 8192 / 4 else inv / 8 if w > 8192 / 1 else (1 - s) * inv / 8 + s * inv, s = (8192 / w - 1) / 3
// i = 0 and 20 are kept, 29 .. 34 smoothed (30 and 32 here), 35 .. 63 divided by 8.
TEST(Rope, Llama31InvFreqLiterals) {
  const Vec got = kernel_inv_freq(128, 500000.0, kLlama31);
  const struct {
    int i;
    double want;
  } literals[] = {{0, 1.0},
                  {20, 0.016560440080994446},
                  {30, 0.0013718935677611381},
                  {32, 0.0005248461609929547},
                  {40, 3.428102195952591e-05},
                  {63, 3.068925988914511e-07}};
  for (const auto& l : literals) EXPECT_NEAR(got[l.i], l.want, 1e-14 * l.want) << "inv_freq[" << l.i << "]";
}

// Each entry is cos / sin of p * inv_freq[i] rounded once to f32; checked past Llama 3's original context.
TEST(Rope, TableHoldsRoundedCosSin) {
  for (const auto& [D, scaling] : {std::pair{128, kLlama31}, std::pair{2, kNoScaling}, std::pair{10, kLlama31}}) {
    const int positions = 8200, half = D / 2;
    const double theta = 500000.0;
    std::vector<float> cos(static_cast<std::size_t>(positions) * half), sin(cos.size());
    rope_table(cos.data(), sin.data(), positions, D, theta, scaling);
    const Vec inv = hf_inv_freq(D, theta, scaling);
    double worst = 0;
    for (int p = 0; p < positions; ++p)
      for (int i = 0; i < half; ++i) {
        const std::size_t k = static_cast<std::size_t>(p) * half + i;
        worst = test::worse(worst, test::abs_diff(cos[k], static_cast<float>(std::cos(p * inv[i]))));
        worst = test::worse(worst, test::abs_diff(sin[k], static_cast<float>(std::sin(p * inv[i]))));
      }
    EXPECT_LE(worst, 6e-8) << "D=" << D;  // at most one f32 step apart (for a last-bit difference in inv_freq)
    for (int i = 0; i < half; ++i) {
      EXPECT_EQ(cos[i], 1.0f);
      EXPECT_EQ(sin[i], 0.0f);
    }
  }
  rope_table(nullptr, nullptr, 0, 8, 10000.0, kNoScaling);  // no positions: nothing written
}

// ---- the rotation -------------------------------------------------------------------------------------------

struct Shape {
  int B, T, heads, D, pos0;
};
const Shape kShapes[] = {{1, 1, 1, 2, 0},     {2, 5, 3, 6, 0}, {1, 7, 2, 64, 3}, {3, 4, 5, 10, 11},
                         {2, 3, 1, 26, 8190}, {0, 4, 2, 8, 0}, {2, 0, 2, 8, 0},  {2, 3, 0, 8, 0}};

// A contiguous [B, T, heads * D] tensor and the table its positions need.
struct Problem {
  std::vector<float> x, cos, sin;
  std::size_t row_stride, batch_stride;
};
Problem make(const Shape& s, unsigned seed) {
  Problem u;
  u.row_stride = static_cast<std::size_t>(s.heads) * s.D;
  u.batch_stride = s.T * u.row_stride;
  u.x = randn(s.B * u.batch_stride, seed);
  const int positions = s.pos0 + s.T, half = s.D / 2;
  u.cos.resize(static_cast<std::size_t>(positions) * half);
  u.sin.resize(u.cos.size());
  rope_table(u.cos.data(), u.sin.data(), positions, s.D, 500000.0, seed % 2 ? kLlama31 : kNoScaling);
  return u;
}

TEST(Rope, ForwardMatchesDoubleReference) {
  for (const Shape& s : kShapes) {
    Problem u = make(s, 7 + s.D);
    const Vec want = ref_rotate(Vec(u.x.begin(), u.x.end()), u.cos, u.sin, s.T, s.B * s.T, s.heads, s.D, s.pos0);
    std::vector<float> got = u.x;
    rope_forward(got.data(), u.cos.data(), u.sin.data(), s.B, s.T, s.heads, s.D, s.pos0, u.row_stride, u.batch_stride);
    EXPECT_LE(pair_err(got, want, u.x, s.D), 1e-6) << "B=" << s.B << " T=" << s.T << " D=" << s.D;
  }
}

// rope_backward turns d(rotated) into d(unrotated), in place: checked against central differences of
// sum(rotate(x) * R) computed in double.
TEST(Rope, BackwardMatchesFiniteDifferences) {
  for (const Shape& s : kShapes) {
    Problem u = make(s, 17 + s.D);
    const int rows = s.B * s.T;
    const auto R = randn(u.x.size(), 18 + s.D);
    Vec xd(u.x.begin(), u.x.end());
    auto loss = [&] {
      const Vec out = ref_rotate(xd, u.cos, u.sin, s.T, rows, s.heads, s.D, s.pos0);
      double l = 0;
      for (std::size_t i = 0; i < out.size(); ++i) l += out[i] * R[i];
      return l;
    };
    Vec want(xd.size());
    for (std::size_t i = 0; i < xd.size(); ++i) {
      const double x0 = xd[i], h = 1e-4;
      xd[i] = x0 + h;
      const double up = loss();
      xd[i] = x0 - h;
      const double down = loss();
      xd[i] = x0;
      want[i] = (up - down) / (2 * h);
    }
    std::vector<float> dx = R;  // the incoming gradient, rotated where it is (not added to)
    rope_backward(dx.data(), u.cos.data(), u.sin.data(), s.B, s.T, s.heads, s.D, s.pos0, u.row_stride, u.batch_stride);
    EXPECT_LE(pair_err(dx, want, R, s.D), 1e-6) << "B=" << s.B << " T=" << s.T << " D=" << s.D;
  }
}

TEST(Rope, BackwardUndoesForward) {
  const Shape s{2, 9, 4, 128, 8000};
  Problem u = make(s, 27);
  std::vector<float> x = u.x;
  rope_forward(x.data(), u.cos.data(), u.sin.data(), s.B, s.T, s.heads, s.D, s.pos0, u.row_stride, u.batch_stride);
  EXPECT_GT(test::max_abs(x, u.x), 0.1) << "forward left x as it was";
  rope_backward(x.data(), u.cos.data(), u.sin.data(), s.B, s.T, s.heads, s.D, s.pos0, u.row_stride, u.batch_stride);
  EXPECT_LE(pair_err(x, Vec(u.x.begin(), u.x.end()), u.x, s.D), 1e-6);
}

// Rows t of a run starting at pos0 = 7 are bitwise the rows 7 + t of a run from 0 (decoding against prefill).
TEST(Rope, LaterPositionsMatchALongerRun) {
  const int B = 2, T_long = 12, pos0 = 7, T = T_long - pos0, heads = 3, D = 16;
  const Shape s{B, T_long, heads, D, 0};
  Problem u = make(s, 37);
  std::vector<float> tail;
  for (int b = 0; b < B; ++b)
    tail.insert(tail.end(), u.x.begin() + b * u.batch_stride + pos0 * u.row_stride,
                u.x.begin() + (b + 1) * u.batch_stride);
  std::vector<float> long_run = u.x;
  rope_forward(long_run.data(), u.cos.data(), u.sin.data(), B, T_long, heads, D, 0, u.row_stride, u.batch_stride);
  rope_forward(tail.data(), u.cos.data(), u.sin.data(), B, T, heads, D, pos0, u.row_stride, T * u.row_stride);
  std::vector<float> want;
  for (int b = 0; b < B; ++b)
    want.insert(want.end(), long_run.begin() + b * u.batch_stride + pos0 * u.row_stride,
                long_run.begin() + (b + 1) * u.batch_stride);
  EXPECT_TRUE(bitwise_equal(tail, want));
}

// A packed qkv row [q: Hq heads | k: Hk heads | v: Hk heads | pad], rotated as a view of heads = Hq + Hk heads
// from column 0: the view equals a contiguous run bitwise, and v, the pad and the gaps between batches are untouched.
TEST(Rope, RotatesOnlyTheViewOfAPackedRow) {
  const int B = 2, T = 5, Hq = 4, Hk = 2, D = 8, heads = Hq + Hk, view = heads * D, W = (Hq + 2 * Hk) * D + 3;
  std::vector<float> cos(static_cast<std::size_t>(T) * D / 2), sin(cos.size());
  rope_table(cos.data(), sin.data(), T, D, 10000.0, kNoScaling);
  // [B, T, W] with a gap of 5 floats after each batch, and [T, B, W] (sequence-major).
  const std::pair<std::size_t, std::size_t> layouts[] = {{W, T * W + 5}, {B * W, W}};
  for (const auto& [row_stride, batch_stride] : layouts) {
    const std::size_t total = std::max((B - 1) * batch_stride + (T - 1) * row_stride + W, B * batch_stride);
    const auto orig = randn(total, 47);
    std::vector<char> in_view(total, 0);
    std::vector<float> compact;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        const std::size_t row = b * batch_stride + t * row_stride;
        compact.insert(compact.end(), orig.begin() + row, orig.begin() + row + view);
        std::fill(in_view.begin() + row, in_view.begin() + row + view, 1);
      }
    for (bool backward : {false, true}) {
      auto run = backward ? rope_backward : rope_forward;
      std::vector<float> x = orig, want = compact;
      run(want.data(), cos.data(), sin.data(), B, T, heads, D, 0, view, T * view);
      run(x.data(), cos.data(), sin.data(), B, T, heads, D, 0, row_stride, batch_stride);
      std::vector<float> got;
      int changed_outside = 0;
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
          const std::size_t row = b * batch_stride + t * row_stride;
          got.insert(got.end(), x.begin() + row, x.begin() + row + view);
        }
      for (std::size_t i = 0; i < total; ++i)
        if (!in_view[i] && std::memcmp(&x[i], &orig[i], sizeof(float)) != 0) ++changed_outside;
      EXPECT_TRUE(bitwise_equal(got, want)) << "row_stride " << row_stride << " backward " << backward;
      EXPECT_EQ(changed_outside, 0) << "row_stride " << row_stride << " backward " << backward;
      EXPECT_GT(test::max_abs(got, compact), 0.1) << "the view was not rotated";
    }
  }
}

TEST(Rope, ResultsDoNotDependOnThreadCount) {
  const Shape s{3, 50, 6, 64, 5};
  Problem u0 = make(s, 57);
  auto run = [&](int threads) {
    ScopedThreads scope(threads);
    std::vector<float> cos(u0.cos.size()), sin(u0.sin.size());
    rope_table(cos.data(), sin.data(), s.pos0 + s.T, s.D, 500000.0, kLlama31);
    std::vector<float> x = u0.x, dx = u0.x;
    rope_forward(x.data(), cos.data(), sin.data(), s.B, s.T, s.heads, s.D, s.pos0, u0.row_stride, u0.batch_stride);
    rope_backward(dx.data(), cos.data(), sin.data(), s.B, s.T, s.heads, s.D, s.pos0, u0.row_stride, u0.batch_stride);
    return std::vector<std::vector<float>>{cos, sin, x, dx};
  };
  const auto one = run(1);
  for (int threads : {2, 3}) {
    const auto many = run(threads);
    for (std::size_t i = 0; i < one.size(); ++i)
      EXPECT_TRUE(bitwise_equal(one[i], many[i])) << "output " << i << " (cos, sin, x, dx), " << threads << " threads";
  }
}

TEST(Rope, RejectsBadArguments) {
  std::vector<double> inv(64);
  std::vector<float> buf(4096, 1.0f);
  float* p = buf.data();
  for (int D : {0, -2, 7}) {
    EXPECT_THROW(rope_inv_freq(inv.data(), D, 10000.0, kNoScaling), Error) << D;
    EXPECT_THROW(rope_table(p, p, 4, D, 10000.0, kNoScaling), Error) << D;
    EXPECT_THROW(rope_forward(p, p, p, 1, 1, 1, D, 0, 8, 8), Error) << D;
    EXPECT_THROW(rope_backward(p, p, p, 1, 1, 1, D, 0, 8, 8), Error) << D;
  }
  EXPECT_THROW(rope_inv_freq(inv.data(), 8, 0.0, kNoScaling), Error);
  EXPECT_THROW(rope_inv_freq(inv.data(), 8, 10000.0, llama3(8.0, 4.0, 4.0, 8192)), Error);  // high == low
  EXPECT_THROW(rope_inv_freq(inv.data(), 8, 10000.0, llama3(0.0, 1.0, 4.0, 8192)), Error);
  EXPECT_THROW(rope_inv_freq(inv.data(), 8, 10000.0, llama3(8.0, 0.0, 4.0, 8192)), Error);
  EXPECT_THROW(rope_inv_freq(inv.data(), 8, 10000.0, llama3(8.0, 1.0, 4.0, 0)), Error);
  EXPECT_THROW(rope_table(p, p, -1, 8, 10000.0, kNoScaling), Error);
  EXPECT_THROW(rope_forward(p, p, p, -1, 1, 1, 8, 0, 8, 8), Error);
  EXPECT_THROW(rope_forward(p, p, p, 1, -1, 1, 8, 0, 8, 8), Error);
  EXPECT_THROW(rope_forward(p, p, p, 1, 1, -1, 8, 0, 8, 8), Error);
  EXPECT_THROW(rope_forward(p, p, p, 1, 1, 1, 8, -1, 8, 8), Error);
  EXPECT_THROW(rope_forward(p, p, p, 1, 2, 2, 8, 0, 8, 32), Error);   // rows overlap: row_stride < heads * D
  EXPECT_THROW(rope_backward(p, p, p, 2, 1, 2, 8, 0, 16, 8), Error);  // batches overlap
  // One row or one batch: its stride is never used, so any value is accepted.
  std::vector<float> cos(4, 1.0f), sin(4, 0.0f);
  EXPECT_NO_THROW(rope_forward(p, cos.data(), sin.data(), 1, 1, 2, 8, 0, 0, 0));
}

}  // namespace
}  // namespace strata::cpu
