// The CPU kernels (kernels/cpu) against naive double-precision references, and their backwards against finite differences.
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <new>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/device_registry.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/kernel_table.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vec_math.h"
#include "tests/kernels/cpu/kernel_test_data.h"
#include "tests/support/compare.h"
#include "tests/support/test_support.h"

// ---- an allocation ledger: the peak bytes operator new holds above a baseline (for the attention workspace) ----
// Every allocation is counted (malloc_usable_size both ways, so new and delete agree); a test resets the peak to
// the bytes live before the call and reads how far above that the call went. noinline keeps GCC from pairing
// the free() inside delete with a new at the call site (-Wmismatched-new-delete).
namespace {
std::atomic<std::size_t> g_live{0}, g_peak{0};

void ledger_reset() { g_peak = g_live.load(); }
std::size_t ledger_peak_above(std::size_t base) { return g_peak.load() - base; }
}  // namespace

__attribute__((noinline)) void* operator new(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (!p) throw std::bad_alloc();
  const std::size_t live = g_live.fetch_add(malloc_usable_size(p)) + malloc_usable_size(p);
  std::size_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return p;
}
__attribute__((noinline)) void operator delete(void* p) noexcept {
  if (!p) return;
  g_live.fetch_sub(malloc_usable_size(p));
  std::free(p);
}
__attribute__((noinline)) void operator delete(void* p, std::size_t) noexcept { operator delete(p); }

namespace strata::cpu {
namespace {

using test::randn;

using Vec = std::vector<double>;

std::vector<int32_t> rand_tokens(std::size_t n, int V, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(rng() % V);
  return v;
}
Vec to_d(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// max |got - want| over max |want|: the error relative to the tensor's scale (infinite on a non-finite value).
double rel_err(const float* got, const Vec& want) {
  return strata::test::max_abs_over_scale(std::span<const float>(got, want.size()), want);
}
#define EXPECT_CLOSE(got, want, tol) EXPECT_LE(rel_err((got).data(), (want)), (tol)) << #got " vs " #want
// A gradient that started at g0 and had delta added: compare (got - g0) with want.
Vec plus(const std::vector<float>& g0, const Vec& delta) {
  Vec r(delta.size());
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = g0[i] + delta[i];
  return r;
}

// Central differences of a double function at x, for every index: d f / d x[i].
Vec finite_diff(const std::function<double(const Vec&)>& f, Vec x, double h = 1e-5) {
  Vec g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + h;
    const double fp = f(x);
    x[i] = xi - h;
    const double fm = f(x);
    x[i] = xi;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}
double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- naive double references --------------------------------------------------------------------------------

void ref_layernorm(Vec& out, Vec& mean, Vec& rstd, const Vec& x, const Vec& w, const Vec& b, int N, int C) {
  out.assign(static_cast<std::size_t>(N) * C, 0);
  mean.assign(N, 0);
  rstd.assign(N, 0);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= C;
    const double s = 1 / std::sqrt(v + 1e-5);
    for (int c = 0; c < C; ++c) out[n * C + c] = (x[n * C + c] - m) * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

void ref_layernorm_backward(Vec& dx, Vec& dw, Vec& db, const Vec& dy, const Vec& x, const Vec& w, int N, int C) {
  Vec out, mean, rstd;
  ref_layernorm(out, mean, rstd, x, w, Vec(C, 0), N, C);
  dx.assign(x.size(), 0);
  dw.assign(C, 0);
  db.assign(C, 0);
  for (int n = 0; n < N; ++n) {
    double g_mean = 0, gx_mean = 0;
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[n * C + c] - mean[n]) * rstd[n];
      g_mean += dy[n * C + c] * w[c] / C;
      gx_mean += dy[n * C + c] * w[c] * xhat / C;
      dw[c] += dy[n * C + c] * xhat;
      db[c] += dy[n * C + c];
    }
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[n * C + c] - mean[n]) * rstd[n];
      dx[n * C + c] = (dy[n * C + c] * w[c] - g_mean - xhat * gx_mean) * rstd[n];
    }
  }
}

// out[M,N] = op(A) op(B), A [M,K] or (ta) [K,M], B [K,N] or (tb) [N,K].
Vec ref_gemm(bool ta, bool tb, int M, int N, int K, const Vec& A, const Vec& B) {
  Vec out(static_cast<std::size_t>(M) * N, 0);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k)
        s += (ta ? A[static_cast<std::size_t>(k) * M + i] : A[static_cast<std::size_t>(i) * K + k]) *
             (tb ? B[static_cast<std::size_t>(j) * K + k] : B[static_cast<std::size_t>(k) * N + j]);
      out[static_cast<std::size_t>(i) * N + j] = s;
    }
  return out;
}

// A qkv row of attention with NH query heads of D = C / NH and KVH key / value heads: [q: C | k: KVH D | v: KVH D].
std::size_t qkv_width(int C, int NH, int KVH) { return static_cast<std::size_t>(C) + 2 * KVH * (C / NH); }
// Column d of query head h's part (0 q, 1 k, 2 v) in a qkv row: k and v of key / value head h / (NH / KVH).
std::size_t qkv_col(int C, int NH, int KVH, int part, int h, int d) {
  const int D = C / NH, g = part == 0 ? h : h / (NH / KVH);
  return (part == 0 ? 0 : static_cast<std::size_t>(C) + (part - 1) * KVH * D) + static_cast<std::size_t>(g) * D + d;
}

// Causal attention with the whole T x T score matrix, straight from the spec (query head h reading key / value head
// h / (NH / KVH)).
void ref_attention(Vec& out, Vec& lse, const Vec& qkv, int B, int T, int C, int NH, int KVH) {
  const int D = C / NH;
  const double scale = 1 / std::sqrt(static_cast<double>(D));
  const std::size_t W = qkv_width(C, NH, KVH);
  out.assign(static_cast<std::size_t>(B) * T * C, 0);
  lse.assign(static_cast<std::size_t>(B) * NH * T, 0);
  auto at = [&](int b, int t, int part, int h, int d) {
    return qkv[(static_cast<std::size_t>(b) * T + t) * W + qkv_col(C, NH, KVH, part, h, d)];
  };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        Vec s(i + 1);
        double m = -INFINITY, sum = 0;
        for (int j = 0; j <= i; ++j) {
          double acc = 0;
          for (int d = 0; d < D; ++d) acc += at(b, i, 0, h, d) * at(b, j, 1, h, d);
          s[j] = acc * scale;
          m = std::max(m, s[j]);
        }
        for (int j = 0; j <= i; ++j) sum += std::exp(s[j] - m);
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = 0; j <= i; ++j) acc += std::exp(s[j] - m) / sum * at(b, j, 2, h, d);
          out[(static_cast<std::size_t>(b) * T + i) * C + h * D + d] = acc;
        }
        lse[(static_cast<std::size_t>(b) * NH + h) * T + i] = m + std::log(sum);
      }
}

// The textbook softmax backward (no D_i shortcut, no lse): an independent check of the FlashAttention backward. A
// key / value head's gradient gathers the terms of every query head that reads it.
Vec ref_attention_backward(const Vec& dout, const Vec& qkv, int B, int T, int C, int NH, int KVH) {
  const int D = C / NH;
  const double scale = 1 / std::sqrt(static_cast<double>(D));
  const std::size_t W = qkv_width(C, NH, KVH);
  Vec dqkv(qkv.size(), 0);
  auto idx = [&](int b, int t, int part, int h, int d) {
    return (static_cast<std::size_t>(b) * T + t) * W + qkv_col(C, NH, KVH, part, h, d);
  };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        Vec p(i + 1), dp(i + 1);
        double m = -INFINITY, sum = 0, pdp = 0;
        for (int j = 0; j <= i; ++j) {
          double acc = 0;
          for (int d = 0; d < D; ++d) acc += qkv[idx(b, i, 0, h, d)] * qkv[idx(b, j, 1, h, d)];
          p[j] = acc * scale;
          m = std::max(m, p[j]);
        }
        for (int j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - m));
        for (int j = 0; j <= i; ++j) {
          p[j] /= sum;
          double acc = 0;
          for (int d = 0; d < D; ++d)
            acc += dout[(static_cast<std::size_t>(b) * T + i) * C + h * D + d] * qkv[idx(b, j, 2, h, d)];
          dp[j] = acc;
          pdp += p[j] * dp[j];
        }
        for (int j = 0; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - pdp) * scale;
          for (int d = 0; d < D; ++d) {
            dqkv[idx(b, j, 2, h, d)] += p[j] * dout[(static_cast<std::size_t>(b) * T + i) * C + h * D + d];
            dqkv[idx(b, i, 0, h, d)] += ds * qkv[idx(b, j, 1, h, d)];
            dqkv[idx(b, j, 1, h, d)] += ds * qkv[idx(b, i, 0, h, d)];
          }
        }
      }
  return dqkv;
}

double ref_gelu(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double ref_gelu_grad(double x) {
  const double b = std::sqrt(2 / M_PI), th = std::tanh(b * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * b * (1 + 3 * 0.044715 * x * x);
}

class CpuKernels : public testing::Test {
 protected:
  void SetUp() override { set_num_threads(2); }
};

// ---- encoder ------------------------------------------------------------------------------------------------

TEST_F(CpuKernels, EncoderForwardAndBackward) {
  const int B = 3, T = 7, C = 67, V = 5, Tctx = 9;  // V small so tokens repeat within and across rows
  auto wte = randn(static_cast<std::size_t>(V) * C, 1), wpe = randn(static_cast<std::size_t>(Tctx) * C, 2);
  auto tokens = rand_tokens(B * T, V, 3);
  std::vector<float> out(static_cast<std::size_t>(B) * T * C);
  encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  for (int i = 0; i < B * T; ++i)
    for (int c = 0; c < C; ++c) ASSERT_EQ(out[i * C + c], wte[tokens[i] * C + c] + wpe[(i % T) * C + c]);

  auto dout = randn(out.size(), 4);
  auto dwte = randn(wte.size(), 5), dwpe = randn(wpe.size(), 6);  // nonzero: the backward must add
  Vec want_wte = to_d(dwte), want_wpe = to_d(dwpe);
  for (int i = 0; i < B * T; ++i)
    for (int c = 0; c < C; ++c) {
      want_wte[tokens[i] * C + c] += dout[i * C + c];
      want_wpe[(i % T) * C + c] += dout[i * C + c];
    }
  encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  EXPECT_CLOSE(dwte, want_wte, 1e-6);
  EXPECT_CLOSE(dwpe, want_wpe, 1e-6);
}

// ---- layernorm ----------------------------------------------------------------------------------------------

TEST_F(CpuKernels, LayernormMatchesReference) {
  for (auto [N, C] : {std::pair{1, 1}, {5, 3}, {64, 384}, {17, 100}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C);
    auto x = randn(static_cast<std::size_t>(N) * C, 10, 2.0f, 0.5f), w = randn(C, 11), b = randn(C, 12);
    std::vector<float> out(x.size()), mean(N), rstd(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    Vec rout, rmean, rrstd;
    ref_layernorm(rout, rmean, rrstd, to_d(x), to_d(w), to_d(b), N, C);
    EXPECT_CLOSE(out, rout, 2e-6);
    EXPECT_CLOSE(mean, rmean, 2e-6);
    EXPECT_CLOSE(rstd, rrstd, 2e-6);

    auto dy = randn(x.size(), 13);
    auto dx = randn(x.size(), 14), dw = randn(C, 15), db = randn(C, 16);
    auto dx0 = dx, dw0 = dw, db0 = db;
    layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    Vec rdx, rdw, rdb;
    ref_layernorm_backward(rdx, rdw, rdb, to_d(dy), to_d(x), to_d(w), N, C);
    EXPECT_LE(rel_err(dx.data(), plus(dx0, rdx)), 2e-6);
    EXPECT_LE(rel_err(dw.data(), plus(dw0, rdw)), 2e-6);
    EXPECT_LE(rel_err(db.data(), plus(db0, rdb)), 2e-6);
  }
}

TEST_F(CpuKernels, LayernormBackwardMatchesFiniteDifferences) {
  const int N = 4, C = 6;
  auto x = randn(N * C, 20, 1.5f), w = randn(C, 21), b = randn(C, 22), dy = randn(N * C, 23);
  std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C, 0), dw(C, 0), db(C, 0);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  const Vec X = to_d(x), W = to_d(w), Bb = to_d(b), DY = to_d(dy);
  auto loss = [&](const Vec& xx, const Vec& ww, const Vec& bb) {
    Vec o, m, s;
    ref_layernorm(o, m, s, xx, ww, bb, N, C);
    return dot(o, DY);
  };
  EXPECT_CLOSE(dx, finite_diff([&](const Vec& v) { return loss(v, W, Bb); }, X), 1e-5);
  EXPECT_CLOSE(dw, finite_diff([&](const Vec& v) { return loss(X, v, Bb); }, W), 1e-5);
  EXPECT_CLOSE(db, finite_diff([&](const Vec& v) { return loss(X, W, v); }, Bb), 1e-5);
}

// ---- matmuls ------------------------------------------------------------------------------------------------

TEST_F(CpuKernels, MatmulMatchesReference) {
  struct Case {
    int N, IC, OC;
    bool bias, dinp;
  };
  for (auto cs : {Case{1, 1, 1, true, true}, Case{7, 5, 3, true, true}, Case{64, 96, 288, true, true},
                  Case{33, 100, 17, false, true}, Case{12, 48, 20, true, false}, Case{0, 4, 4, true, true},
                  Case{3, 0, 5, true, true}}) {
    SCOPED_TRACE(testing::Message() << "N=" << cs.N << " IC=" << cs.IC << " OC=" << cs.OC << " bias=" << cs.bias);
    const int N = cs.N, IC = cs.IC, OC = cs.OC;
    auto x = randn(static_cast<std::size_t>(N) * IC, 30), w = randn(static_cast<std::size_t>(IC) * OC, 31, 0.1f),
         bias = randn(OC, 32);
    std::vector<float> out(static_cast<std::size_t>(N) * OC, NAN);
    matmul_forward(out.data(), x.data(), w.data(), cs.bias ? bias.data() : nullptr, N, IC, OC);
    Vec want = ref_gemm(false, false, N, OC, IC, to_d(x), to_d(w));
    if (cs.bias)
      for (std::size_t i = 0; i < want.size(); ++i) want[i] += bias[i % OC];
    EXPECT_CLOSE(out, want, 2e-6);

    auto dy = randn(out.size(), 33);
    auto dx = randn(x.size(), 34), dw = randn(w.size(), 35), db = randn(OC, 36);
    auto dx0 = dx, dw0 = dw, db0 = db;
    matmul_backward(cs.dinp ? dx.data() : nullptr, dw.data(), cs.bias ? db.data() : nullptr, dy.data(), x.data(),
                    w.data(), N, IC, OC);
    EXPECT_LE(rel_err(dx.data(), cs.dinp ? plus(dx0, ref_gemm(false, true, N, IC, OC, to_d(dy), to_d(w))) : to_d(dx0)),
              2e-6);
    EXPECT_LE(rel_err(dw.data(), plus(dw0, ref_gemm(true, false, IC, OC, N, to_d(x), to_d(dy)))), 2e-6);
    Vec rdb(OC, 0);
    for (std::size_t i = 0; i < dy.size(); ++i) rdb[i % OC] += dy[i];
    EXPECT_LE(rel_err(db.data(), cs.bias ? plus(db0, rdb) : to_d(db0)), 2e-6);
  }
}

TEST_F(CpuKernels, LmHeadMatchesReference) {
  for (auto [N, C, V] : {std::tuple{1, 1, 1}, {9, 16, 50}, {64, 96, 1000}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C << " V=" << V);
    auto x = randn(static_cast<std::size_t>(N) * C, 40), wte = randn(static_cast<std::size_t>(V) * C, 41, 0.1f);
    std::vector<float> logits(static_cast<std::size_t>(N) * V, NAN);
    lm_head_forward(logits.data(), x.data(), wte.data(), N, C, V);
    EXPECT_CLOSE(logits, ref_gemm(false, true, N, V, C, to_d(x), to_d(wte)), 2e-6);
    auto dl = randn(logits.size(), 42);
    auto dx = randn(x.size(), 43), dwte = randn(wte.size(), 44);
    auto dx0 = dx, dwte0 = dwte;
    lm_head_backward(dx.data(), dwte.data(), dl.data(), x.data(), wte.data(), N, C, V);
    EXPECT_LE(rel_err(dx.data(), plus(dx0, ref_gemm(false, false, N, C, V, to_d(dl), to_d(wte)))), 2e-6);
    EXPECT_LE(rel_err(dwte.data(), plus(dwte0, ref_gemm(true, false, V, C, N, to_d(dl), to_d(x)))), 2e-6);
  }
}

// ---- attention ----------------------------------------------------------------------------------------------

struct AttnCase {
  int B, T, C, NH;
  int KVH = 0;  // key / value heads; 0: NH (multi-head)
  int kv() const { return KVH > 0 ? KVH : NH; }
  std::size_t qkv_numel() const { return static_cast<std::size_t>(B) * T * qkv_width(C, NH, kv()); }
};
std::ostream& operator<<(std::ostream& os, const AttnCase& c) {
  return os << "B=" << c.B << " T=" << c.T << " C=" << c.C << " NH=" << c.NH << " KVH=" << c.kv();
}

class CpuAttention : public CpuKernels, public testing::WithParamInterface<AttnCase> {};

// Tiles are 64 rows and 64 keys: T = 1, short, exactly one tile, just over one, several with a ragged end; head
// widths D = 4, 16, 64 and 12 (not a multiple of the 8-float vectors).
INSTANTIATE_TEST_SUITE_P(Shapes, CpuAttention,
                         testing::Values(AttnCase{1, 1, 8, 2}, AttnCase{2, 5, 12, 3}, AttnCase{1, 64, 32, 2},
                                         AttnCase{2, 65, 16, 1}, AttnCase{1, 130, 48, 3}, AttnCase{2, 200, 128, 2},
                                         AttnCase{2, 70, 36, 3}, AttnCase{1, 256, 384, 6}));
// Grouped-query attention: (NH, KVH) = (4, 4), (4, 2), (4, 1) (multi-query), (6, 2), (6, 3), T never a whole number of
// tiles, D = 8, 16 and 12.
INSTANTIATE_TEST_SUITE_P(GroupedQuery, CpuAttention,
                         testing::Values(AttnCase{2, 70, 32, 4, 4}, AttnCase{2, 100, 64, 4, 2},
                                         AttnCase{1, 130, 32, 4, 1}, AttnCase{2, 67, 48, 6, 2},
                                         AttnCase{1, 150, 72, 6, 3}, AttnCase{2, 5, 24, 6, 3}));

TEST_P(CpuAttention, MatchesNaiveReference) {
  const AttnCase cs = GetParam();
  const int B = cs.B, T = cs.T, C = cs.C, NH = cs.NH, KVH = cs.kv();
  auto qkv = randn(cs.qkv_numel(), 50, 1.5f);  // wide scores: softmax far from uniform
  std::vector<float> out(static_cast<std::size_t>(B) * T * C, NAN), lse(static_cast<std::size_t>(B) * NH * T, NAN);
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, KVH);
  Vec rout, rlse;
  ref_attention(rout, rlse, to_d(qkv), B, T, C, NH, KVH);
  EXPECT_CLOSE(out, rout, 2e-6);
  EXPECT_CLOSE(lse, rlse, 2e-6);

  auto dout = randn(out.size(), 51);
  auto dqkv = randn(qkv.size(), 52);
  auto dqkv0 = dqkv;
  attention_backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), B, T, C, NH, KVH);
  EXPECT_LE(rel_err(dqkv.data(), plus(dqkv0, ref_attention_backward(to_d(dout), to_d(qkv), B, T, C, NH, KVH))),
            1e-5);
}

// ---- bf16 products ----------------------------------------------------------------------------------------

float to_bf16(double x) { return bf16_to_f32(f32_to_bf16(static_cast<float>(x))); }

// sqrt(sum (got - want)^2 / sum want^2): rare single-element differences (a value next to a bf16 rounding boundary
// that exp_f32 and std::exp put on different sides) barely move it, a missing or extra rounding everywhere does.
double rms_err(const std::vector<float>& got, const Vec& want) {
  double num = 0, den = 1e-300;
  for (std::size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

TEST(CpuBf16, RoundToBf16IsNearestEven) {
  const float one = 1.0f, ulp = 0x1p-7f;  // bf16 keeps 7 fraction bits
  const std::vector<float> in = {one, one + ulp / 2, one + 3 * ulp / 2, one + ulp / 2 + 0x1p-20f, -(one + ulp / 2),
                                 65504.0f, 1e-40f, INFINITY, -INFINITY, 0.0f, -0.0f};
  const std::vector<float> want = {one, one, one + 2 * ulp, one + ulp, -one, 65536.0f, 1e-40f,
                                   INFINITY, -INFINITY, 0.0f, -0.0f};
  std::vector<float> out(in.size());
  round_to_bf16(out.data(), in.data(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i)
    if (i != 6) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(out[i]), std::bit_cast<std::uint32_t>(want[i])) << in[i];
    }
  EXPECT_EQ(out[6], bf16_to_f32(f32_to_bf16(1e-40f)));  // a subnormal rounds like any other value
  const float nan = std::nanf("");
  round_to_bf16(out.data(), &nan, 1);
  EXPECT_TRUE(std::isnan(out[0]));
  // Over many values: the conversion of core/dtype.h (what storage uses), and at most half a bf16 ulp away.
  const auto x = randn(1 << 16, 90, 3.0f);
  std::vector<float> r(x.size());
  round_to_bf16(r.data(), x.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(r[i], bf16_to_f32(f32_to_bf16(x[i]))) << x[i];
    ASSERT_LE(std::fabs(r[i] - x[i]), std::fabs(x[i]) * 0x1p-8f) << x[i];
  }
}

// The CPU Kernels with bf16 products: each matmul against a double-precision product of the operands rounded to
// bf16 beforehand (to the f32 sums' round-off, 1e-5 of the tensor's scale, on either CPU path: oneDNN's bf16
// matmul, or rounded operands through dnnl_sgemm), and far from the f32 product; the bias gradient is the f32 dout's
// column sums; the f32 kernels (kF32) are untouched.
TEST(CpuBf16, CpuMatmulsRoundEveryOperand) {
  std::printf("bf16 products on this CPU: %s\n", bf16_gemm_name());
  auto device = create_device(DeviceKind::kCpu, 0, 60.0);
  auto bf16 = make_kernels(*device, DType::kBF16);
  auto f32 = make_kernels(*device, DType::kF32);
  EXPECT_THROW(make_kernels(*device, DType::kF16), strata::Error);
  const int N = 37, IC = 48, OC = 40, V = 29;
  auto inp = randn(std::size_t(N) * IC, 91), w = randn(std::size_t(IC) * OC, 92), b = randn(OC, 93);
  auto dout = randn(std::size_t(N) * OC, 94), wte = randn(std::size_t(V) * IC, 95), dlogits = randn(std::size_t(N) * V, 96);
  auto r = [](const std::vector<float>& v) {  // rounded to bf16, in double
    Vec out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_bf16(v[i]);
    return out;
  };
  // C[m,n] = base[m,n] + sum_k A(m,k) B(k,n), A(m,k) = A[m*ars + k*acs], B(k,n) = B[k*brs + n*bcs].
  auto product = [](int M, int Nn, int K, const Vec& A, int ars, int acs, const Vec& B, int brs, int bcs, Vec base) {
    if (base.empty()) base.assign(std::size_t(M) * Nn, 0.0);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < Nn; ++n) {
        double acc = 0;
        for (int k = 0; k < K; ++k) acc += A[std::size_t(m) * ars + std::size_t(k) * acs] * B[std::size_t(k) * brs + std::size_t(n) * bcs];
        base[std::size_t(m) * Nn + n] += acc;
      }
    return base;
  };
  Vec bias_rows(std::size_t(N) * OC);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < OC; ++c) bias_rows[std::size_t(n) * OC + c] = b[c];

  std::vector<float> out(std::size_t(N) * OC), plain(out.size());
  bf16->matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, IC, OC);
  f32->matmul_forward(plain.data(), inp.data(), w.data(), b.data(), N, IC, OC);
  const Vec want = product(N, OC, IC, r(inp), IC, 1, r(w), OC, 1, bias_rows);
  EXPECT_CLOSE(out, want, 1e-5);
  EXPECT_GE(rel_err(plain.data(), want), 1e-4) << "the f32 product is this close to the bf16 one";

  std::vector<float> dinp(inp.size(), 0.5f), dw(w.size(), 0.25f), db(OC, 0.125f);
  const std::vector<float> dinp0 = dinp, dw0 = dw, db0 = db;
  bf16->matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
  EXPECT_LE(rel_err(dinp.data(), plus(dinp0, product(N, IC, OC, r(dout), OC, 1, r(w), 1, OC, {}))), 1e-5);
  EXPECT_LE(rel_err(dw.data(), plus(dw0, product(IC, OC, N, r(inp), 1, IC, r(dout), OC, 1, {}))), 1e-5);
  Vec dbias(OC, 0.0);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < OC; ++c) dbias[c] += dout[std::size_t(n) * OC + c];
  EXPECT_LE(rel_err(db.data(), plus(db0, dbias)), 1e-6) << "dbias sums the f32 dout";

  std::vector<float> logits(std::size_t(N) * V);
  bf16->lm_head_forward(logits.data(), inp.data(), wte.data(), N, IC, V);
  EXPECT_CLOSE(logits, product(N, V, IC, r(inp), IC, 1, r(wte), 1, IC, {}), 1e-5);
  std::vector<float> dx(inp.size(), 0.0f), dwte(wte.size(), 0.0f);
  bf16->lm_head_backward(dx.data(), dwte.data(), dlogits.data(), inp.data(), wte.data(), N, IC, V);
  EXPECT_CLOSE(dx, product(N, IC, V, r(dlogits), V, 1, r(wte), IC, 1, {}), 1e-5);
  EXPECT_CLOSE(dwte, product(V, IC, N, r(dlogits), 1, V, r(inp), IC, 1, {}), 1e-5);
}

// Attention with bf16 products against a naive reference with the same rounding points: q, k, v and dout rounded;
// in the forward the unnormalised probabilities exp(s - running max) of each 64-key tile rounded after the f32 row
// sum (so the reference walks the same tiles); in the backward P = exp(s - lse) and dS = P (dP - D_i) / sqrt(D)
// from the f32 P, both rounded. The same kernel without rounding is far from that reference. Multi-head and
// grouped-query.
TEST(CpuBf16, AttentionRoundsWhereFlashAttentionDoes) {
  constexpr int kTileK = 64;  // kernels/cpu/attention.cc's key tile
  for (AttnCase cs : {AttnCase{2, 9, 16, 2}, AttnCase{1, 130, 32, 2}, AttnCase{2, 9, 16, 4, 2},
                      AttnCase{1, 70, 32, 4, 1}}) {
    SCOPED_TRACE(testing::Message() << cs);
    const int B = cs.B, T = cs.T, C = cs.C, NH = cs.NH, KVH = cs.kv();
    const int D = C / NH;
    const std::size_t W = qkv_width(C, NH, KVH);
    const double scale = 1 / std::sqrt(static_cast<double>(D));
    auto qkv = randn(cs.qkv_numel(), 97, 1.5f);
    auto dout = randn(std::size_t(B) * T * C, 98);
    round_to_bf16(qkv.data(), qkv.data(), qkv.size());
    round_to_bf16(dout.data(), dout.data(), dout.size());
    auto idx = [&](int b, int t, int part, int h, int d) {
      return (std::size_t(b) * T + t) * W + qkv_col(C, NH, KVH, part, h, d);
    };
    auto at = [&](int b, int t, int part, int h, int d) { return static_cast<double>(qkv[idx(b, t, part, h, d)]); };
    Vec want(std::size_t(B) * T * C), want_lse(std::size_t(B) * NH * T), want_d(qkv.size(), 0.0);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int i = 0; i < T; ++i) {
          Vec s(i + 1), o(D, 0.0);
          for (int j = 0; j <= i; ++j) {
            double acc = 0;
            for (int d = 0; d < D; ++d) acc += at(b, i, 0, h, d) * at(b, j, 1, h, d);
            s[j] = acc * scale;
          }
          double m = -INFINITY, l = 0;
          for (int j0 = 0; j0 <= i; j0 += kTileK) {
            const int j1 = std::min(i + 1, j0 + kTileK);
            double m_new = m;
            for (int j = j0; j < j1; ++j) m_new = std::max(m_new, s[j]);
            const double corr = std::exp(m - m_new);
            for (double& x : o) x *= corr;
            l *= corr;
            for (int j = j0; j < j1; ++j) {
              const double p = std::exp(s[j] - m_new);
              l += p;
              for (int d = 0; d < D; ++d) o[d] += to_bf16(p) * at(b, j, 2, h, d);
            }
            m = m_new;
          }
          for (int d = 0; d < D; ++d) want[(std::size_t(b) * T + i) * C + h * D + d] = o[d] / l;
          want_lse[(std::size_t(b) * NH + h) * T + i] = m + std::log(l);
        }
    std::vector<float> out(want.size()), lse(want_lse.size()), plain(want.size());
    attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, KVH, true);
    attention_forward(plain.data(), lse.data(), qkv.data(), B, T, C, NH, KVH, false);
    EXPECT_LE(rms_err(out, want), 2e-6);
    EXPECT_GE(rms_err(plain, want), 1e-4) << "the rounding of P changes the output";
    EXPECT_CLOSE(lse, want_lse, 2e-6);

    // Backward, from the kernel's own out and lse (as the model calls it).
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        for (int i = 0; i < T; ++i) {
          double di = 0;
          for (int d = 0; d < D; ++d)
            di += static_cast<double>(dout[(std::size_t(b) * T + i) * C + h * D + d]) *
                  out[(std::size_t(b) * T + i) * C + h * D + d];
          for (int j = 0; j <= i; ++j) {
            double sc = 0, dp = 0;
            for (int d = 0; d < D; ++d) {
              sc += at(b, i, 0, h, d) * at(b, j, 1, h, d);
              dp += static_cast<double>(dout[(std::size_t(b) * T + i) * C + h * D + d]) * at(b, j, 2, h, d);
            }
            const double p = std::exp(sc * scale - lse[(std::size_t(b) * NH + h) * T + i]);
            const double pr = to_bf16(p), ds = to_bf16(p * (dp - di) * scale);
            for (int d = 0; d < D; ++d) {
              want_d[idx(b, j, 2, h, d)] += pr * dout[(std::size_t(b) * T + i) * C + h * D + d];
              want_d[idx(b, i, 0, h, d)] += ds * at(b, j, 1, h, d);
              want_d[idx(b, j, 1, h, d)] += ds * at(b, i, 0, h, d);
            }
          }
        }
    std::vector<float> dqkv(qkv.size(), 0.0f), dplain(qkv.size(), 0.0f);
    attention_backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), B, T, C, NH, KVH, true);
    attention_backward(dplain.data(), dout.data(), out.data(), lse.data(), qkv.data(), B, T, C, NH, KVH, false);
    EXPECT_LE(rms_err(dqkv, want_d), 2e-5);
    EXPECT_GE(rms_err(dplain, want_d), 1e-4) << "the rounding of P and dS changes the gradients";
  }
}

// Multi-head, grouped-query (a key / value head's gradient summing its query heads') and multi-query.
TEST_F(CpuKernels, AttentionBackwardMatchesFiniteDifferences) {
  for (AttnCase cs : {AttnCase{1, 1, 4, 1}, AttnCase{2, 7, 8, 2}, AttnCase{1, 67, 4, 2}, AttnCase{2, 7, 8, 4, 2},
                      AttnCase{1, 67, 8, 4, 1}, AttnCase{1, 9, 12, 6, 3}}) {
    SCOPED_TRACE(testing::Message() << cs);
    const int B = cs.B, T = cs.T, C = cs.C, NH = cs.NH, KVH = cs.kv();
    auto qkv = randn(cs.qkv_numel(), 60), dout = randn(static_cast<std::size_t>(B) * T * C, 61);
    std::vector<float> out(dout.size()), lse(static_cast<std::size_t>(B) * NH * T), dqkv(qkv.size(), 0.0f);
    attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, KVH);
    attention_backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), B, T, C, NH, KVH);
    const Vec DY = to_d(dout);
    auto loss = [&](const Vec& q) {
      Vec o, l;
      ref_attention(o, l, q, B, T, C, NH, KVH);
      return dot(o, DY);
    };
    EXPECT_CLOSE(dqkv, finite_diff(loss, to_d(qkv)), 1e-5);
  }
}

TEST_F(CpuKernels, AttentionIsStableForLargeScores) {
  const int B = 1, T = 100, C = 16, NH = 2;
  auto qkv = randn(static_cast<std::size_t>(B) * T * 3 * C, 70, 30.0f);  // scores in the hundreds
  std::vector<float> out(static_cast<std::size_t>(B) * T * C), lse(static_cast<std::size_t>(B) * NH * T);
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, NH);
  Vec rout, rlse;
  ref_attention(rout, rlse, to_d(qkv), B, T, C, NH, NH);
  for (float x : out) ASSERT_TRUE(std::isfinite(x));
  // Scores near 1000 carry float rounding of ~1e-4 absolute into exp(): the inputs' own conditioning.
  EXPECT_CLOSE(out, rout, 5e-4);
  EXPECT_CLOSE(lse, rlse, 1e-6);
}

// The workspace is O(T): doubling T at most doubles it, it stays far below one T x T score matrix, and the bytes
// the kernels really allocate (counted by the operator new ledger above) stay within what it reports.
TEST_F(CpuKernels, AttentionWorkspaceIsLinearInT) {
  const int B = 2, C = 384, NH = 6;
  for (int T : {1, 64, 256, 1000, 4096}) {
    const std::size_t ws = attention_workspace_bytes(B, T, C, NH), ws2 = attention_workspace_bytes(B, 2 * T, C, NH);
    EXPECT_LE(ws2, 2 * ws + 4096) << "T=" << T;
    EXPECT_GE(ws2, ws) << "T=" << T;
  }
  const int T = 4096;
  EXPECT_LT(attention_workspace_bytes(B, T, C, NH), static_cast<std::size_t>(T) * T * sizeof(float) / 16);

  for (int KVH : {NH, 2})  // the workspace does not depend on the key / value heads
    for (int t : {1, 100, 300}) {
      auto qkv = randn(static_cast<std::size_t>(B) * t * qkv_width(C, NH, KVH), 80, 0.5f),
           dout = randn(static_cast<std::size_t>(B) * t * C, 81);
      std::vector<float> out(dout.size()), lse(static_cast<std::size_t>(B) * NH * t), dqkv(qkv.size(), 0.0f);
      const std::size_t base = g_live.load();
      ledger_reset();
      attention_forward(out.data(), lse.data(), qkv.data(), B, t, C, NH, KVH);
      const std::size_t fwd_peak = ledger_peak_above(base);
      ledger_reset();
      attention_backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), B, t, C, NH, KVH);
      const std::size_t bwd_peak = ledger_peak_above(base);
      EXPECT_GT(fwd_peak, 0u) << "the ledger saw no allocation: is operator new replaced?";
      // + malloc's rounding: a page for a block it maps (glibc maps the first ones over 128 KiB; run alone, this
      // test's backward workspace is such a block).
      const std::size_t slack = 4096 + 64;
      EXPECT_LE(fwd_peak, attention_workspace_bytes(B, t, C, NH) + slack) << "T=" << t << " KVH=" << KVH;
      EXPECT_LE(bwd_peak, attention_workspace_bytes(B, t, C, NH) + slack) << "T=" << t << " KVH=" << KVH;
    }
}

// Every kernel but the BLAS matmuls computes each output in a fixed order: results are bitwise the same for any
// thread count.
TEST_F(CpuKernels, ResultsDoNotDependOnThreadCount) {
  const int B = 2, T = 150, C = 64, NH = 4, V = 300, N = B * T;
  auto qkv = randn(static_cast<std::size_t>(N) * 3 * C, 90), dout = randn(static_cast<std::size_t>(N) * C, 91);
  auto x = randn(static_cast<std::size_t>(N) * C, 92), w = randn(C, 93), b = randn(C, 94);
  auto logits = randn(static_cast<std::size_t>(N) * V, 95, 3.0f);
  auto targets = rand_tokens(N, V, 96);
  auto tokens = rand_tokens(N, 20, 97);
  auto run = [&](int threads) {
    set_num_threads(threads);
    std::vector<float> out(dout.size()), lse(static_cast<std::size_t>(B) * NH * T), dqkv(qkv.size(), 0.0f);
    attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, NH);
    attention_backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), B, T, C, NH, NH);
    std::vector<float> ln(x.size()), mean(N), rstd(N), dx(x.size(), 0.0f), dw(C, 0.0f), db(C, 0.0f);
    layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                       C);
    std::vector<float> losses(N), dlogits(logits.size());
    crossentropy_softmax(losses.data(), dlogits.data(), logits.data(), targets.data(), N, V, 0.5f);
    std::vector<float> dwte(20 * C, 0.0f), dwpe(static_cast<std::size_t>(T) * C, 0.0f);
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    std::vector<std::vector<float>> all = {out, lse, dqkv, ln, dx, dw, db, losses, dlogits, dwte, dwpe};
    return all;
  };
  auto one = run(1);
  for (int threads : {2, 3, 5}) {
    auto many = run(threads);
    for (std::size_t i = 0; i < one.size(); ++i)
      EXPECT_EQ(one[i], many[i]) << "output " << i << " with " << threads << " threads";
  }
  set_num_threads(2);
  EXPECT_EQ(num_threads(), 2);
}

// ---- grouped-query attention ----------------------------------------------------------------------------------

// The backward's task per (batch, key / value head) loops over the group's query heads in order: nothing is atomic,
// and the results (f32 and bf16 products) are bitwise the same for any thread count.
TEST_F(CpuKernels, GroupedQueryAttentionDoesNotDependOnThreadCount) {
  for (AttnCase cs : {AttnCase{2, 150, 64, 4, 2}, AttnCase{2, 150, 64, 4, 1}, AttnCase{1, 130, 72, 6, 3}})
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(testing::Message() << cs << " bf16 " << bf16);
      const int B = cs.B, T = cs.T, C = cs.C, NH = cs.NH, KVH = cs.kv();
      auto qkv = randn(cs.qkv_numel(), 98), dout = randn(static_cast<std::size_t>(B) * T * C, 99);
      auto run = [&](int threads) {
        set_num_threads(threads);
        std::vector<float> out(dout.size()), lse(static_cast<std::size_t>(B) * NH * T), dqkv = randn(qkv.size(), 9);
        attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, KVH, bf16);
        attention_backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), B, T, C, NH, KVH, bf16);
        return std::vector<std::vector<float>>{out, lse, dqkv};
      };
      const auto one = run(1);
      for (int threads : {2, 3}) {
        const auto many = run(threads);
        for (std::size_t i = 0; i < one.size(); ++i)
          EXPECT_EQ(one[i], many[i]) << "output " << i << " with " << threads << " threads";
      }
    }
  set_num_threads(2);
}

// Grouped-query attention is multi-head attention over keys and values repeated per query head (Hugging Face's
// repeat_kv): the same output and lse bit for bit (each query head's task reads its key / value head's columns), the
// same dq bit for bit (the same terms in the same order), and dk, dv the sums over each group of the multi-head
// ones (to f32 rounding: the group's terms are summed in another order).
TEST_F(CpuKernels, GroupedQueryAttentionIsMultiHeadOverRepeatedKeys) {
  for (AttnCase cs : {AttnCase{2, 100, 64, 4, 2}, AttnCase{1, 130, 32, 4, 1}, AttnCase{2, 67, 72, 6, 3}}) {
    SCOPED_TRACE(testing::Message() << cs);
    const int B = cs.B, T = cs.T, C = cs.C, NH = cs.NH, KVH = cs.kv(), D = C / NH;
    const std::size_t W = qkv_width(C, NH, KVH), W3 = 3 * static_cast<std::size_t>(C);
    const auto qkv = randn(cs.qkv_numel(), 100, 1.5f), dout = randn(static_cast<std::size_t>(B) * T * C, 101);
    std::vector<float> rep(static_cast<std::size_t>(B) * T * W3);  // [q | k, v of head h / (NH / KVH) for each h]
    for (std::size_t r = 0; r < static_cast<std::size_t>(B) * T; ++r)
      for (int part = 0; part < 3; ++part)
        for (int h = 0; h < NH; ++h)
          for (int d = 0; d < D; ++d)
            rep[r * W3 + part * C + h * D + d] = qkv[r * W + qkv_col(C, NH, KVH, part, h, d)];
    std::vector<float> out(dout.size()), lse(static_cast<std::size_t>(B) * NH * T), mout(out.size()), mlse(lse.size());
    attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, KVH);
    attention_forward(mout.data(), mlse.data(), rep.data(), B, T, C, NH, NH);
    EXPECT_EQ(out, mout);
    EXPECT_EQ(lse, mlse);
    std::vector<float> dqkv(qkv.size(), 0.0f), mdqkv(rep.size(), 0.0f);
    attention_backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), B, T, C, NH, KVH);
    attention_backward(mdqkv.data(), dout.data(), mout.data(), mlse.data(), rep.data(), B, T, C, NH, NH);
    Vec want(qkv.size(), 0.0);  // the multi-head gradient folded back onto the key / value heads
    std::size_t dq_diff = 0;
    for (std::size_t r = 0; r < static_cast<std::size_t>(B) * T; ++r)
      for (int part = 0; part < 3; ++part)
        for (int h = 0; h < NH; ++h)
          for (int d = 0; d < D; ++d) {
            const std::size_t to = r * W + qkv_col(C, NH, KVH, part, h, d), from = r * W3 + part * C + h * D + d;
            want[to] += mdqkv[from];
            if (part == 0 && std::bit_cast<std::uint32_t>(dqkv[to]) != std::bit_cast<std::uint32_t>(mdqkv[from]))
              ++dq_diff;
          }
    EXPECT_EQ(dq_diff, 0u) << "dq differs from the multi-head one";
    EXPECT_CLOSE(dqkv, want, 1e-6);
  }
}

// The CPU Kernels with bf16 products round a grouped-query qkv row whole (C + 2 KVH D floats) and a block's k and v
// over their KVH D columns: the same bits as kernels/cpu's bf16 attention on operands rounded beforehand.
TEST(CpuBf16, KernelTableRoundsGroupedQueryOperands) {
  auto device = create_device(DeviceKind::kCpu, 0, 60.0);
  auto table = make_kernels(*device, DType::kBF16);
  const AttnCase cs{2, 70, 48, 6, 2};
  const int B = cs.B, T = cs.T, C = cs.C, NH = cs.NH, KVH = cs.kv();
  const std::size_t W = qkv_width(C, NH, KVH), KV = (W - C) / 2, seq = T, c = C, nh = NH;
  const auto qkv = randn(cs.qkv_numel(), 120, 1.5f), dout = randn(static_cast<std::size_t>(B) * T * C, 121);
  auto rqkv = qkv, rdout = dout;
  round_to_bf16(rqkv.data(), rqkv.data(), rqkv.size());
  round_to_bf16(rdout.data(), rdout.data(), rdout.size());
  std::vector<float> out(dout.size()), lse(static_cast<std::size_t>(B) * NH * T), out1(out), lse1(lse);
  table->attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, KVH);
  attention_forward(out1.data(), lse1.data(), rqkv.data(), B, T, C, NH, KVH, true);
  EXPECT_EQ(out, out1);
  EXPECT_EQ(lse, lse1);
  std::vector<float> dqkv(qkv.size(), 0.0f), dqkv1(dqkv);
  table->attention_backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), B, T, C, NH, KVH);
  attention_backward(dqkv1.data(), rdout.data(), out.data(), lse.data(), rqkv.data(), B, T, C, NH, KVH, true);
  EXPECT_EQ(dqkv, dqkv1);

  // The blocks, over the whole sequence as one block in strided views.
  const AttentionBlock blk{B, NH, C, T, 0, T, 0, KVH};
  auto views = [&](const std::vector<float>& x) {
    return std::array<Rows, 3>{Rows{x.data(), W, seq * W}, Rows{x.data() + C, W, seq * W},
                               Rows{x.data() + C + KV, W, seq * W}};
  };
  const auto v = views(qkv), rv = views(rqkv);
  std::vector<float> bo(out.size()), bl(lse.size()), bo1(bo), bl1(bl), di(lse.size());
  table->attention_block_forward(blk, RowsOut{bo.data(), c, seq * c}, RowStatsOut{bl.data(), seq, nh * seq}, v[0],
                                 v[1], v[2]);
  attention_block_forward(blk, RowsOut{bo1.data(), c, seq * c}, RowStatsOut{bl1.data(), seq, nh * seq}, rv[0], rv[1],
                          rv[2], true);
  EXPECT_EQ(bo, bo1);
  EXPECT_EQ(bl, bl1);
  attention_row_dot(blk, RowStatsOut{di.data(), seq, nh * seq}, Rows{dout.data(), c, seq * c},
                    Rows{out.data(), c, seq * c});
  std::vector<float> bd(qkv.size(), 0.0f), bd1(bd);
  const RowStats l{lse.data(), seq, nh * seq}, d{di.data(), seq, nh * seq};
  table->attention_block_backward(blk, RowsOut{bd.data(), W, seq * W}, RowsOut{bd.data() + C, W, seq * W},
                                  RowsOut{bd.data() + C + KV, W, seq * W}, Rows{dout.data(), c, seq * c}, l, d, v[0],
                                  v[1], v[2]);
  attention_block_backward(blk, RowsOut{bd1.data(), W, seq * W}, RowsOut{bd1.data() + C, W, seq * W},
                           RowsOut{bd1.data() + C + KV, W, seq * W}, Rows{rdout.data(), c, seq * c}, l, d, rv[0],
                           rv[1], rv[2], true);
  EXPECT_EQ(bd, bd1);
}

// KVH must divide NH; the whole-sequence kernels take it explicitly (>= 1).
TEST_F(CpuKernels, AttentionRejectsKvHeadsThatDoNotDivideTheHeads) {
  std::vector<float> buf(4096, 0.0f);
  for (int kvh : {0, 3, 5, -2}) {
    SCOPED_TRACE(kvh);
    EXPECT_EQ(test::error_code_of([&] { attention_forward(buf.data(), buf.data(), buf.data(), 1, 4, 16, 4, kvh); }),
              ErrorCode::kInvalidArgument);
    EXPECT_EQ(test::error_code_of([&] {
                attention_backward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), 1, 4, 16, 4, kvh);
              }),
              ErrorCode::kInvalidArgument);
  }
  const AttentionBlock blk{1, 4, 16, 4, 0, 4, 0, 3};
  const Rows r{buf.data(), 16, 64};
  const RowsOut o{buf.data(), 16, 64};
  EXPECT_EQ(test::error_code_of([&] { attention_block_forward(blk, o, RowStatsOut{buf.data(), 4, 16}, r, r, r); }),
            ErrorCode::kInvalidArgument);
}

// ---- exp_f32 (softmax, attention and gelu use it) -----------------------------------------------------------

// Within 2 ulp of the correctly rounded exp over a sweep of floats in [-110, 90] (every 61st bit pattern: ~34M
// values), subnormal results within 2 steps of 2^-149, and the special values.
TEST(VecMath, ExpIsAccurate) {
  auto bits = [](float f) { return std::bit_cast<int32_t>(f); };
  long worst_ulp = 0;
  float worst_x = 0;
  std::vector<float> xs, ys;
  auto check = [&] {
    ys.resize(xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) ys[i] = detail::exp_f32(xs[i]);  // the vectorized loop
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const float want = static_cast<float>(std::exp(static_cast<double>(xs[i])));
      if (std::fabs(want) < 1.17549435e-38f) {
        ASSERT_LE(std::fabs(ys[i] - want), 2 * 1.4e-45f) << xs[i];
      } else {
        const long ulp = std::labs(static_cast<long>(bits(ys[i])) - bits(want));
        if (ulp > worst_ulp) worst_ulp = ulp, worst_x = xs[i];
      }
    }
    xs.clear();
  };
  // Walk the bit patterns of |x| (they grow with |x|), both signs.
  for (int32_t b = 0; b <= bits(110.0f); b += 61) {
    const float x = std::bit_cast<float>(b);
    xs.push_back(-x);
    if (x <= 90.0f) xs.push_back(x);
    if (xs.size() >= (1u << 20)) check();
  }
  check();
  EXPECT_LE(worst_ulp, 2) << "at x = " << worst_x;
  EXPECT_EQ(detail::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(detail::exp_f32(-INFINITY), 0.0f);
  EXPECT_EQ(detail::exp_f32(-1000.0f), 0.0f);
  EXPECT_EQ(detail::exp_f32(INFINITY), INFINITY);
  EXPECT_EQ(detail::exp_f32(89.0f), INFINITY);
  EXPECT_TRUE(std::isnan(detail::exp_f32(NAN)));
  EXPECT_EQ(detail::exp_f32(88.7f), std::exp(88.7f));
}

// ---- gelu, residual -----------------------------------------------------------------------------------------

TEST_F(CpuKernels, GeluForwardAndBackward) {
  std::vector<float> x = randn(100003, 100, 3.0f);  // past the parallel threshold, odd length
  for (float v : {0.0f, -0.0f, 1e-20f, -1e-20f, 10.0f, -10.0f, 50.0f, -50.0f}) x.push_back(v);
  std::vector<float> y(x.size());
  gelu_forward(y.data(), x.data(), x.size());
  Vec want(x.size()), wgrad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) want[i] = ref_gelu(x[i]);
  EXPECT_CLOSE(y, want, 1e-6);
  for (std::size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(y[i], want[i], 4e-7 * std::max(1.0, std::fabs(want[i]))) << x[i];

  auto dy = randn(x.size(), 101), dx = randn(x.size(), 102);
  auto dx0 = dx;
  gelu_backward(dx.data(), x.data(), dy.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(dx[i], dx0[i] + dy[i] * ref_gelu_grad(x[i]), 1e-6 * (std::fabs(dx0[i]) + std::fabs(dy[i]) + 1)) << x[i];

  // ref_gelu_grad against finite differences, and the in-place forms.
  for (double v : {-3.0, -0.7, 0.0, 0.3, 2.5})
    EXPECT_NEAR(ref_gelu_grad(v), (ref_gelu(v + 1e-6) - ref_gelu(v - 1e-6)) / 2e-6, 1e-8);
  std::vector<float> inplace = x;
  gelu_forward(inplace.data(), inplace.data(), inplace.size());
  EXPECT_EQ(inplace, y);
}

TEST_F(CpuKernels, ResidualForward) {
  auto a = randn(50001, 110), b = randn(50001, 111);
  std::vector<float> out(a.size());
  residual_forward(out.data(), a.data(), b.data(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(out[i], a[i] + b[i]);
  residual_forward(a.data(), a.data(), b.data(), a.size());
  EXPECT_EQ(a, out);
}

// ---- softmax + cross-entropy --------------------------------------------------------------------------------

TEST_F(CpuKernels, CrossentropySoftmax) {
  for (auto [N, V, stddev, shift] :
       {std::tuple{1, 1, 1.0f, 0.0f}, {5, 7, 1.0f, 0.0f}, {64, 8192, 2.0f, 0.0f}, {8, 1000, 20.0f, 1000.0f}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " V=" << V << " stddev=" << stddev << " shift=" << shift);
    auto logits = randn(static_cast<std::size_t>(N) * V, 120, stddev, shift);
    auto targets = rand_tokens(N, V, 121);
    const float dscale = 1.0f / N;
    Vec rloss(N), rdl(logits.size());
    for (int n = 0; n < N; ++n) {
      double m = -INFINITY, sum = 0;
      for (int v = 0; v < V; ++v) m = std::max(m, static_cast<double>(logits[n * V + v]));
      for (int v = 0; v < V; ++v) sum += std::exp(logits[n * V + v] - m);
      rloss[n] = std::log(sum) + m - logits[n * V + targets[n]];
      for (int v = 0; v < V; ++v) rdl[n * V + v] = (std::exp(logits[n * V + v] - m) / sum - (v == targets[n])) * dscale;
    }
    std::vector<float> losses(N, NAN), dl(logits.size(), NAN);
    crossentropy_softmax(losses.data(), dl.data(), logits.data(), targets.data(), N, V, dscale);
    for (int n = 0; n < N; ++n) EXPECT_NEAR(losses[n], rloss[n], 1e-6 * std::max(1.0, rloss[n]));
    EXPECT_CLOSE(dl, rdl, 1e-6);
    // A gradient row sums to 0 (softmax sums to 1).
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int v = 0; v < V; ++v) s += dl[n * V + v];
      EXPECT_NEAR(s, 0.0, 1e-6 * dscale);
    }
    // In place, and losses only.
    std::vector<float> inplace = logits, losses2(N), losses3(N);
    crossentropy_softmax(losses2.data(), inplace.data(), inplace.data(), targets.data(), N, V, dscale);
    EXPECT_EQ(losses2, losses);
    EXPECT_EQ(inplace, dl);
    crossentropy_softmax(losses3.data(), nullptr, logits.data(), targets.data(), N, V, dscale);
    EXPECT_EQ(losses3, losses);
  }
}

// The loss gradient against finite differences of the double loss.
TEST_F(CpuKernels, CrossentropyGradientMatchesFiniteDifferences) {
  const int N = 3, V = 11;
  auto logits = randn(N * V, 130, 2.0f);
  auto targets = rand_tokens(N, V, 131);
  std::vector<float> losses(N), dl(N * V);
  crossentropy_softmax(losses.data(), dl.data(), logits.data(), targets.data(), N, V, 1.0f / N);
  auto mean_loss = [&](const Vec& x) {
    double total = 0;
    for (int n = 0; n < N; ++n) {
      double m = -INFINITY, sum = 0;
      for (int v = 0; v < V; ++v) m = std::max(m, x[n * V + v]);
      for (int v = 0; v < V; ++v) sum += std::exp(x[n * V + v] - m);
      total += std::log(sum) + m - x[n * V + targets[n]];
    }
    return total / N;
  };
  EXPECT_CLOSE(dl, finite_diff(mean_loss, to_d(logits)), 1e-6);
}

}  // namespace
}  // namespace strata::cpu
