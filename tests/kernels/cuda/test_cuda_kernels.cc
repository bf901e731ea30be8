// The CUDA kernels (kernels/cuda) against the CPU kernels, their reference: every forward and backward
// at sizes that are and are not multiples of the tiles. Every test skips where no GPU is visible.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/device_registry.h"
#include "kernels/cuda/ops.h"
#include "kernels/kernel_table.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/tp_ops.h"
#include "tests/support/compare.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using namespace strata::cpu;  // the CPU kernels, unqualified

using Floats = std::vector<float>;
using Tokens = std::vector<int32_t>;

// Tolerances: max |gpu - cpu| over the tensor's scale (see rel_err). The f32 kernels differ from the CPU only in
// summation order and in exp/log implementations; attention and the lm head sum longer chains.
constexpr double kTol = 1e-5;
constexpr double kAttentionTol = 1e-4;
constexpr double kBf16Tol = 1e-2;

Floats randn(std::size_t n, unsigned seed, float stddev = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  Floats v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Floats per qkv row of attention with NH query and KVH key / value heads: [q: C | k: KVH D | v: KVH D], D = C / NH.
std::size_t qkv_row(int C, int NH, int KVH) {
  return static_cast<std::size_t>(C) + 2 * static_cast<std::size_t>(KVH) * static_cast<std::size_t>(C / NH);
}

Tokens rand_tokens(std::size_t n, int V, unsigned seed) {
  std::mt19937 rng(seed);
  Tokens v(n);
  for (auto& x : v) x = static_cast<int32_t>(rng() % static_cast<unsigned>(V));
  return v;
}

// max |got - want| over max |want - base|: the error relative to the tensor's scale. For a gradient, base is the
// value it was pre-filled with, so the error is judged against what the backward added (and a kernel that
// overwrote instead of adding fails). Infinite on any non-finite value, on either side (tests/support/compare.h).
double rel_err(const Floats& got, const Floats& want, const Floats& base = {}) {
  const double err = strata::test::max_abs(got, want);
  if (err == strata::test::kFar) return err;
  double scale = 1e-30;
  for (std::size_t i = 0; i < want.size(); ++i)
    scale = std::max(scale, std::fabs(static_cast<double>(want[i]) - (base.empty() ? 0.0 : base[i])));
  return err / scale;
}
#define EXPECT_CLOSE(got, want, tol) EXPECT_LE(rel_err((got), (want)), (tol)) << #got " vs " #want
#define EXPECT_GRAD_CLOSE(got, want, base, tol) \
  EXPECT_LE(rel_err((got), (want), (base)), (tol)) << #got " vs " #want " (pre-filled with " #base ")"

// Device memory for n elements of T, freed on destruction. Made from a host vector it holds a copy; made from a
// size it holds 0xff bytes (NaN as floats), so an output element a kernel fails to write is caught.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t n) : n_(n) {
    if (n_ == 0) return;
    STRATA_CHECK_CUDA(cudaMalloc(&ptr_, bytes()));
    STRATA_CHECK_CUDA(cudaMemset(ptr_, 0xff, bytes()));
  }
  explicit DeviceArray(const std::vector<T>& host) : n_(host.size()) {
    if (n_ == 0) return;
    STRATA_CHECK_CUDA(cudaMalloc(&ptr_, bytes()));
    STRATA_CHECK_CUDA(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return static_cast<T*>(ptr_); }
  // The contents once `stream` has finished.
  std::vector<T> host(cudaStream_t stream) const {
    STRATA_CHECK_CUDA(cudaStreamSynchronize(stream));
    std::vector<T> out(n_);
    if (n_ > 0) STRATA_CHECK_CUDA(cudaMemcpy(out.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  std::size_t bytes() const { return n_ * sizeof(T); }
  void* ptr_ = nullptr;
  std::size_t n_;
};
using Dev = DeviceArray<float>;

std::string shape(std::initializer_list<std::pair<const char*, long>> dims) {
  std::string s;
  for (const auto& [name, value] : dims) s += std::string(s.empty() ? "" : ", ") + name + " = " + std::to_string(value);
  return s;
}

class CudaKernels : public testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";  // before any other CUDA call
    STRATA_CHECK_CUDA(cudaSetDevice(test::runtime().local_rank() % cuda_device_count()));
    STRATA_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

// ---- encoder ------------------------------------------------------------------------------------------------

TEST_F(CudaKernels, Encoder) {
  const int V = 101;
  struct Shape {
    int B, T, C;
  };
  for (const Shape s : {Shape{1, 1, 48}, Shape{2, 37, 48}, Shape{3, 128, 64}}) {
    SCOPED_TRACE(shape({{"B", s.B}, {"T", s.T}, {"C", s.C}}));
    const std::size_t N = static_cast<std::size_t>(s.B) * s.T;
    const Tokens tokens = rand_tokens(N, V, 1);  // N > V for the larger shapes: tokens repeat
    const Floats wte = randn(static_cast<std::size_t>(V) * s.C, 2), wpe = randn(static_cast<std::size_t>(s.T) * s.C, 3);
    Floats out(N * s.C);
    encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C);
    DeviceArray<int32_t> d_tokens(tokens);
    Dev d_wte(wte), d_wpe(wpe), d_out(N * s.C);
    cuda::encoder_forward(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), s.B, s.T, s.C, stream_);
    EXPECT_CLOSE(d_out.host(stream_), out, kTol);

    const Floats dout = randn(N * s.C, 4);
    const Floats dwte0 = randn(wte.size(), 5, 0.5f), dwpe0 = randn(wpe.size(), 6, 0.5f);
    Floats dwte = dwte0, dwpe = dwpe0;
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), s.B, s.T, s.C);
    Dev d_dout(dout), d_dwte(dwte0), d_dwpe(dwpe0);
    cuda::encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), s.B, s.T, s.C, stream_);
    EXPECT_GRAD_CLOSE(d_dwte.host(stream_), dwte, dwte0, kTol);
    EXPECT_GRAD_CLOSE(d_dwpe.host(stream_), dwpe, dwpe0, kTol);
  }
}

// ---- layernorm ----------------------------------------------------------------------------------------------

TEST_F(CudaKernels, LayerNorm) {
  struct Shape {
    int N, C;
  };
  for (const Shape s : {Shape{1, 48}, Shape{37, 48}, Shape{128, 64}, Shape{75, 333}}) {
    SCOPED_TRACE(shape({{"N", s.N}, {"C", s.C}}));
    const std::size_t NC = static_cast<std::size_t>(s.N) * s.C;
    const Floats x = randn(NC, 10, 2.0f, 0.5f);  // an offset mean exercises the variance's centring
    const Floats w = randn(s.C, 11, 0.5f, 1.0f), b = randn(s.C, 12, 0.5f);
    Floats out(NC), mean(s.N), rstd(s.N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), s.N, s.C);
    Dev d_x(x), d_w(w), d_b(b), d_out(NC), d_mean(s.N), d_rstd(s.N);
    cuda::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_b.get(), s.N, s.C,
                            stream_);
    EXPECT_CLOSE(d_out.host(stream_), out, kTol);
    EXPECT_CLOSE(d_mean.host(stream_), mean, kTol);
    EXPECT_CLOSE(d_rstd.host(stream_), rstd, kTol);

    // The backward from the CPU's saved statistics, so it is judged on its own.
    const Floats dout = randn(NC, 13);
    const Floats dx0 = randn(NC, 14, 0.5f), dw0 = randn(s.C, 15, 0.5f), db0 = randn(s.C, 16, 0.5f);
    Floats dx = dx0, dw = dw0, db = db0;
    layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(),
                       s.N, s.C);
    Dev d_dout(dout), d_cpu_mean(mean), d_cpu_rstd(rstd), d_dx(dx0), d_dw(dw0), d_db(db0);
    cuda::layernorm_backward(d_dx.get(), d_dw.get(), d_db.get(), d_dout.get(), d_x.get(), d_w.get(), d_cpu_mean.get(),
                             d_cpu_rstd.get(), s.N, s.C, stream_);
    EXPECT_GRAD_CLOSE(d_dx.host(stream_), dx, dx0, kTol);
    EXPECT_GRAD_CLOSE(d_dw.host(stream_), dw, dw0, kTol);
    EXPECT_GRAD_CLOSE(d_db.host(stream_), db, db0, kTol);
  }
}

// ---- the Llama-style family: RMSNorm, rotary embeddings, SwiGLU --------------------------------------------------

// These differ from the CPU only in summation order (in double) and in expf against exp_f32 (each within 2 ulp).
constexpr double kLlamaTol = 1e-6;

// N = 0, one row, a prime, rows past a block of warps; C below, at and above a warp, prime and odd.
struct RmsShape {
  int N, C;
  float eps;
};
constexpr RmsShape kRmsShapes[] = {{0, 64, 1e-5f}, {1, 48, 1e-5f}, {37, 31, 1e-6f}, {128, 64, 1e-5f},
                                   {75, 333, 1e-6f}, {9, 4099, 1e-5f}, {3, 1, 0.0f}};

TEST_F(CudaKernels, RmsNorm) {
  for (const RmsShape s : kRmsShapes) {
    SCOPED_TRACE(shape({{"N", s.N}, {"C", s.C}}) + ", eps = " + std::to_string(s.eps));
    const std::size_t NC = static_cast<std::size_t>(s.N) * s.C;
    const Floats x = randn(NC, 230, 2.0f, 0.5f), w = randn(s.C, 231, 0.5f, 1.0f);
    Floats out(NC), rstd(s.N);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), s.N, s.C, s.eps);
    Dev d_x(x), d_w(w), d_out(NC), d_rstd(s.N);
    cuda::rmsnorm_forward(d_out.get(), d_rstd.get(), d_x.get(), d_w.get(), s.N, s.C, s.eps, stream_);
    EXPECT_CLOSE(d_out.host(stream_), out, kLlamaTol);
    EXPECT_CLOSE(d_rstd.host(stream_), rstd, kLlamaTol);

    // The backward from the CPU's rstd, so it is judged on its own.
    const Floats dout = randn(NC, 232), dx0 = randn(NC, 233, 0.5f), dw0 = randn(s.C, 234, 0.5f);
    Floats dx = dx0, dw = dw0;
    rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), s.N, s.C);
    Dev d_dout(dout), d_cpu_rstd(rstd), d_dx(dx0), d_dw(dw0), d_dw2(dw0);
    cuda::rmsnorm_backward(d_dx.get(), d_dw.get(), d_dout.get(), d_x.get(), d_w.get(), d_cpu_rstd.get(), s.N, s.C,
                           stream_);
    const Floats got_dw = d_dw.host(stream_);
    EXPECT_GRAD_CLOSE(d_dx.host(stream_), dx, dx0, kLlamaTol);
    EXPECT_GRAD_CLOSE(got_dw, dw, dw0, kLlamaTol);
    // One writer per channel summing rows in a fixed order: a second run gives the same bits.
    Dev d_dx2(dx0);
    cuda::rmsnorm_backward(d_dx2.get(), d_dw2.get(), d_dout.get(), d_x.get(), d_w.get(), d_cpu_rstd.get(), s.N, s.C,
                           stream_);
    const Floats again = d_dw2.host(stream_);
    EXPECT_EQ(std::memcmp(got_dw.data(), again.data(), got_dw.size() * sizeof(float)), 0) << "dweight, run 2";
    if (s.N == 0) {
      EXPECT_EQ(std::memcmp(got_dw.data(), dw0.data(), dw0.size() * sizeof(float)), 0) << "N = 0";
    }
  }
}

// Rows laid out as a packed qkv buffer of NH query and KVH key / value heads of D columns, [q | k | v], plus `pad`
// columns after each row and after each batch's rows: rope rotates the q heads (from column 0) and the k heads (from
// column NH D) at positions pos0 .. pos0 + T - 1, and must leave the v columns and the padding untouched, bitwise.
struct RopeCase {
  int B, T, NH, KVH, D, pos0, pad;
  bool llama3;
};
constexpr RopeCase kRopeCases[] = {
    {2, 37, 3, 3, 64, 0, 0, false},   // multi-head, rows back to back
    {3, 5, 4, 2, 16, 100, 7, true},   // grouped-query, a later position, padded rows and batches, llama3 scaling
    {4, 1, 6, 3, 6, 517, 0, true},    // a decode step: one row per sequence; D / 2 odd
    {1, 70, 4, 1, 2, 3, 1, false},    // the smallest head, multi-query
    {2, 33, 5, 5, 128, 4093, 3, true},  // long heads, a prime position
};

TEST_F(CudaKernels, Rope) {
  for (const RopeCase c : kRopeCases) {
    SCOPED_TRACE(shape({{"B", c.B}, {"T", c.T}, {"NH", c.NH}, {"KVH", c.KVH}, {"D", c.D}, {"pos0", c.pos0},
                        {"pad", c.pad}, {"llama3", c.llama3}}));
    const int positions = c.pos0 + c.T, half = c.D / 2;
    RopeScaling scaling;
    if (c.llama3) scaling.kind = RopeScaling::kLlama3;
    Floats cos(static_cast<std::size_t>(positions) * half), sin(cos.size());
    rope_table(cos.data(), sin.data(), positions, c.D, c.llama3 ? 500000.0 : 10000.0, scaling);
    const std::size_t C = static_cast<std::size_t>(c.NH) * c.D, KV = static_cast<std::size_t>(c.KVH) * c.D;
    const std::size_t row = C + 2 * KV + c.pad, batch = c.T * row + c.pad;
    std::vector<bool> rotated(c.B * batch, false);  // the q and k columns of every row
    for (std::size_t b = 0; b < static_cast<std::size_t>(c.B); ++b)
      for (std::size_t t = 0; t < static_cast<std::size_t>(c.T); ++t)
        std::fill_n(rotated.begin() + b * batch + t * row, C + KV, true);
    Dev d_cos(cos), d_sin(sin);

    for (bool backward : {false, true}) {
      SCOPED_TRACE(backward ? "rope_backward" : "rope_forward");
      const Floats x0 = randn(rotated.size(), backward ? 241 : 240);
      Floats want = x0;
      auto cpu_rope = backward ? &cpu::rope_backward : &cpu::rope_forward;
      auto gpu_rope = backward ? &cuda::rope_backward : &cuda::rope_forward;
      cpu_rope(want.data(), cos.data(), sin.data(), c.B, c.T, c.NH, c.D, c.pos0, row, batch);
      cpu_rope(want.data() + C, cos.data(), sin.data(), c.B, c.T, c.KVH, c.D, c.pos0, row, batch);
      Dev d_x(x0);
      gpu_rope(d_x.get(), d_cos.get(), d_sin.get(), c.B, c.T, c.NH, c.D, c.pos0, row, batch, stream_);
      gpu_rope(d_x.get() + C, d_cos.get(), d_sin.get(), c.B, c.T, c.KVH, c.D, c.pos0, row, batch, stream_);
      const Floats got = d_x.host(stream_);
      EXPECT_CLOSE(got, want, kLlamaTol);
      std::size_t touched = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        touched += !rotated[i] && std::memcmp(&got[i], &x0[i], sizeof(float)) != 0;
      EXPECT_EQ(touched, 0u) << "v columns or padding changed";
    }

    // The backward is the transpose of the forward: rotating back returns the input, to a few roundings (cos and sin
    // are rounded to f32, so cos^2 + sin^2 is 1 only to about 1e-7).
    const Floats x0 = randn(rotated.size(), 242);
    Dev d_x(x0);
    cuda::rope_forward(d_x.get(), d_cos.get(), d_sin.get(), c.B, c.T, c.NH, c.D, c.pos0, row, batch, stream_);
    cuda::rope_backward(d_x.get(), d_cos.get(), d_sin.get(), c.B, c.T, c.NH, c.D, c.pos0, row, batch, stream_);
    EXPECT_CLOSE(d_x.host(stream_), x0, kTol);
  }
}

// N = 0, F = 0, one row, primes; gates from -100 (exp(-g) would overflow in the naive sigmoid) through 0 to 100.
TEST_F(CudaKernels, SwiGlu) {
  struct Shape {
    int N, F;
  };
  for (const Shape s : {Shape{0, 64}, Shape{7, 0}, Shape{1, 48}, Shape{37, 31}, Shape{128, 344}, Shape{5, 5003}}) {
    SCOPED_TRACE(shape({{"N", s.N}, {"F", s.F}}));
    const std::size_t NF = static_cast<std::size_t>(s.N) * s.F;
    Floats gu = randn(2 * NF, 250, 3.0f);
    const float edges[] = {-100.0f, -20.0f, -1.2785f, 0.0f, -0.0f, 20.0f, 100.0f};
    for (std::size_t i = 0; s.N > 0 && i < std::size(edges) && i < static_cast<std::size_t>(s.F); ++i)
      gu[i] = edges[i];  // row 0's gates
    Floats out(NF);
    swiglu_forward(out.data(), gu.data(), s.N, s.F);
    Dev d_gu(gu), d_out(NF);
    cuda::swiglu_forward(d_out.get(), d_gu.get(), s.N, s.F, stream_);
    EXPECT_CLOSE(d_out.host(stream_), out, kLlamaTol);

    const Floats dout = randn(NF, 251), dgu0 = randn(2 * NF, 252, 0.5f);
    Floats dgu = dgu0;
    swiglu_backward(dgu.data(), dout.data(), gu.data(), s.N, s.F);
    Dev d_dout(dout), d_dgu(dgu0);
    cuda::swiglu_backward(d_dgu.get(), d_dout.get(), d_gu.get(), s.N, s.F, stream_);
    const Floats got = d_dgu.host(stream_);
    EXPECT_GRAD_CLOSE(got, dgu, dgu0, kLlamaTol);
    // The gate and up halves against their own scales.
    for (int part = 0; part < 2 && NF > 0; ++part) {
      Floats g, want, base;
      for (std::size_t n = 0; n < static_cast<std::size_t>(s.N); ++n)
        for (std::size_t f = 0; f < static_cast<std::size_t>(s.F); ++f) {
          const std::size_t i = n * 2 * s.F + part * s.F + f;
          g.push_back(got[i]);
          want.push_back(dgu[i]);
          base.push_back(dgu0[i]);
        }
      EXPECT_GRAD_CLOSE(g, want, base, kLlamaTol) << (part == 0 ? " (gate)" : " (up)");
    }
  }
}

// The CUDA Kernels table (cuda_kernel_table.cc) against the CPU one for the Llama-style kernels and grouped-query
// attention: the virtuals reach the kernels above with their arguments in place.
TEST_F(CudaKernels, LlamaKernelsMatchTheCpuTable) {
  auto cuda_device = create_device(DeviceKind::kCuda, test::runtime().local_rank() % cuda_device_count(), 60.0);
  auto cpu_device = create_device(DeviceKind::kCpu, 0, 60.0);
  auto gpu = make_kernels(*cuda_device);
  auto cpu = make_kernels(*cpu_device);
  const auto stream = static_cast<cudaStream_t>(cuda_device->compute_stream().native_handle());
  const int B = 2, T = 37, NH = 6, KVH = 2, D = 16, C = NH * D, F = 53, pos0 = 11;
  const int N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C, row = qkv_row(C, NH, KVH);

  const Floats x = randn(NC, 260, 1.5f), w = randn(C, 261, 0.5f, 1.0f), dy = randn(NC, 262);
  Floats y(NC), rstd(N), dx(NC, 0.25f), dw(C, 0.5f);
  cpu->rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  cpu->rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
  Dev d_x(x), d_w(w), d_dy(dy), d_y(NC), d_rstd(N), d_dx(Floats(NC, 0.25f)), d_dw(Floats(C, 0.5f));
  gpu->rmsnorm_forward(d_y.get(), d_rstd.get(), d_x.get(), d_w.get(), N, C, 1e-5f);
  gpu->rmsnorm_backward(d_dx.get(), d_dw.get(), d_dy.get(), d_x.get(), d_w.get(), d_rstd.get(), N, C);
  EXPECT_CLOSE(d_y.host(stream), y, kLlamaTol);
  EXPECT_CLOSE(d_rstd.host(stream), rstd, kLlamaTol);
  EXPECT_GRAD_CLOSE(d_dx.host(stream), dx, Floats(NC, 0.25f), kLlamaTol);
  EXPECT_GRAD_CLOSE(d_dw.host(stream), dw, Floats(C, 0.5f), kLlamaTol);

  Floats cos(static_cast<std::size_t>(pos0 + T) * (D / 2)), sin(cos.size());
  rope_table(cos.data(), sin.data(), pos0 + T, D, 10000.0, RopeScaling{});
  const Floats qkv0 = randn(static_cast<std::size_t>(N) * row, 263);
  Floats qkv = qkv0;
  cpu->rope_forward(qkv.data(), cos.data(), sin.data(), B, T, NH, D, pos0, row, T * row);
  cpu->rope_forward(qkv.data() + C, cos.data(), sin.data(), B, T, KVH, D, pos0, row, T * row);
  Dev d_cos(cos), d_sin(sin), d_qkv(qkv0);
  gpu->rope_forward(d_qkv.get(), d_cos.get(), d_sin.get(), B, T, NH, D, pos0, row, T * row);
  gpu->rope_forward(d_qkv.get() + C, d_cos.get(), d_sin.get(), B, T, KVH, D, pos0, row, T * row);
  EXPECT_CLOSE(d_qkv.host(stream), qkv, kLlamaTol);

  // Grouped-query attention over the rotated qkv, then the gradient rotated back.
  const Floats ady = randn(NC, 264);
  Floats att(NC), lse(static_cast<std::size_t>(B) * NH * T), dqkv(qkv.size(), 0.0f);
  cpu->attention_forward(att.data(), lse.data(), qkv.data(), B, T, C, NH, KVH);
  cpu->attention_backward(dqkv.data(), ady.data(), att.data(), lse.data(), qkv.data(), B, T, C, NH, KVH);
  cpu->rope_backward(dqkv.data(), cos.data(), sin.data(), B, T, NH, D, pos0, row, T * row);
  cpu->rope_backward(dqkv.data() + C, cos.data(), sin.data(), B, T, KVH, D, pos0, row, T * row);
  Dev d_ady(ady), d_att(NC), d_lse(lse.size()), d_dqkv(Floats(qkv.size(), 0.0f));
  gpu->attention_forward(d_att.get(), d_lse.get(), d_qkv.get(), B, T, C, NH, KVH);
  gpu->attention_backward(d_dqkv.get(), d_ady.get(), d_att.get(), d_lse.get(), d_qkv.get(), B, T, C, NH, KVH);
  gpu->rope_backward(d_dqkv.get(), d_cos.get(), d_sin.get(), B, T, NH, D, pos0, row, T * row);
  gpu->rope_backward(d_dqkv.get() + C, d_cos.get(), d_sin.get(), B, T, KVH, D, pos0, row, T * row);
  EXPECT_CLOSE(d_att.host(stream), att, kAttentionTol);
  EXPECT_CLOSE(d_lse.host(stream), lse, kAttentionTol);
  EXPECT_CLOSE(d_dqkv.host(stream), dqkv, kAttentionTol);

  const std::size_t NF = static_cast<std::size_t>(N) * F;
  const Floats gu = randn(2 * NF, 265, 2.0f), sdy = randn(NF, 266);
  Floats s_out(NF), dgu(gu.size(), 0.125f);
  cpu->swiglu_forward(s_out.data(), gu.data(), N, F);
  cpu->swiglu_backward(dgu.data(), sdy.data(), gu.data(), N, F);
  Dev d_gu(gu), d_sdy(sdy), d_sout(s_out.size()), d_dgu(Floats(gu.size(), 0.125f));
  gpu->swiglu_forward(d_sout.get(), d_gu.get(), N, F);
  gpu->swiglu_backward(d_dgu.get(), d_sdy.get(), d_gu.get(), N, F);
  EXPECT_CLOSE(d_sout.host(stream), s_out, kLlamaTol);
  EXPECT_GRAD_CLOSE(d_dgu.host(stream), dgu, Floats(gu.size(), 0.125f), kLlamaTol);
}

// ---- matmuls ------------------------------------------------------------------------------------------------

struct MatmulShape {
  int N, IC, OC;
};
constexpr MatmulShape kMatmulShapes[] = {{1, 48, 144}, {37, 48, 192}, {128, 64, 256}, {37, 37, 5}};

TEST_F(CudaKernels, MatmulForward) {
  cuda::Blas blas(stream_);
  for (const MatmulShape s : kMatmulShapes)
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(shape({{"N", s.N}, {"IC", s.IC}, {"OC", s.OC}, {"bias", with_bias}}));
      const Floats x = randn(static_cast<std::size_t>(s.N) * s.IC, 20);
      const Floats w = randn(static_cast<std::size_t>(s.IC) * s.OC, 21, 0.2f), b = randn(s.OC, 22);
      Floats out(static_cast<std::size_t>(s.N) * s.OC);
      matmul_forward(out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, s.N, s.IC, s.OC);
      Dev d_x(x), d_w(w), d_b(b), d_out(out.size());
      cuda::matmul_forward(d_out.get(), d_x.get(), d_w.get(), with_bias ? d_b.get() : nullptr, s.N, s.IC, s.OC, blas);
      EXPECT_CLOSE(d_out.host(stream_), out, kTol);
    }
}

TEST_F(CudaKernels, MatmulBackward) {
  cuda::Blas blas(stream_);
  for (const MatmulShape s : kMatmulShapes)
    for (bool full : {true, false}) {  // full: dinp and dbias too; otherwise both are null
      SCOPED_TRACE(shape({{"N", s.N}, {"IC", s.IC}, {"OC", s.OC}, {"dinp and dbias", full}}));
      const std::size_t NI = static_cast<std::size_t>(s.N) * s.IC, NO = static_cast<std::size_t>(s.N) * s.OC;
      const Floats x = randn(NI, 30), w = randn(static_cast<std::size_t>(s.IC) * s.OC, 31, 0.2f), dout = randn(NO, 32);
      const Floats dx0 = randn(NI, 33, 0.5f), dw0 = randn(w.size(), 34, 0.5f), db0 = randn(s.OC, 35, 0.5f);
      Floats dx = dx0, dw = dw0, db = db0;
      matmul_backward(full ? dx.data() : nullptr, dw.data(), full ? db.data() : nullptr, dout.data(), x.data(),
                      w.data(), s.N, s.IC, s.OC);
      Dev d_x(x), d_w(w), d_dout(dout), d_dx(dx0), d_dw(dw0), d_db(db0);
      cuda::matmul_backward(full ? d_dx.get() : nullptr, d_dw.get(), full ? d_db.get() : nullptr, d_dout.get(),
                            d_x.get(), d_w.get(), s.N, s.IC, s.OC, blas);
      EXPECT_GRAD_CLOSE(d_dw.host(stream_), dw, dw0, kTol);
      if (full) {
        EXPECT_GRAD_CLOSE(d_dx.host(stream_), dx, dx0, kTol);
        EXPECT_GRAD_CLOSE(d_db.host(stream_), db, db0, kTol);
      } else {
        EXPECT_EQ(d_dx.host(stream_), dx0) << "dinp is null: nothing may be written";
        EXPECT_EQ(d_db.host(stream_), db0) << "dbias is null: nothing may be written";
      }
    }
}

// bf16 operands, f32 accumulation, bf16 output: against the f32 CPU product of the same (bf16-rounded) operands.
// Rounded once, each output is within a bf16 half-ulp (2^-9 relative) of the f32 product, so besides the tensor-
// wide tolerance every element must be within 2^-8 of it (a bf16 accumulation would miss that at IC = 768).
TEST_F(CudaKernels, MatmulForwardBf16) {
  cuda::Blas blas(stream_);
  auto round_bf16 = [](Floats v) {
    for (auto& x : v) x = __bfloat162float(__float2bfloat16(x));
    return v;
  };
  auto to_bf16 = [](const Floats& v) {
    std::vector<__nv_bfloat16> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16(v[i]);
    return out;
  };
  for (const MatmulShape s : {MatmulShape{37, 64, 192}, MatmulShape{128, 768, 96}, MatmulShape{1, 48, 5}})
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(shape({{"N", s.N}, {"IC", s.IC}, {"OC", s.OC}, {"bias", with_bias}}));
      const Floats x = round_bf16(randn(static_cast<std::size_t>(s.N) * s.IC, 40));
      const Floats w = round_bf16(randn(static_cast<std::size_t>(s.IC) * s.OC, 41, 0.2f));
      const Floats b = round_bf16(randn(s.OC, 42));
      Floats out(static_cast<std::size_t>(s.N) * s.OC);
      matmul_forward(out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, s.N, s.IC, s.OC);
      DeviceArray<__nv_bfloat16> d_x(to_bf16(x)), d_w(to_bf16(w)), d_b(to_bf16(b)), d_out(out.size());
      DeviceArray<float> workspace(out.size());
      cuda::matmul_forward_bf16(d_out.get(), d_x.get(), d_w.get(), with_bias ? d_b.get() : nullptr, s.N, s.IC, s.OC,
                                blas, with_bias ? workspace.get() : nullptr);
      const std::vector<__nv_bfloat16> got_bf16 = d_out.host(stream_);
      Floats got(got_bf16.size());
      for (std::size_t i = 0; i < got.size(); ++i) got[i] = __bfloat162float(got_bf16[i]);
      EXPECT_CLOSE(got, out, kBf16Tol);
      double scale = 0;
      for (float v : out) scale = std::max(scale, std::fabs(static_cast<double>(v)));
      std::size_t far = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        far += std::fabs(static_cast<double>(got[i]) - out[i]) > std::ldexp(std::fabs(out[i]), -8) + 1e-6 * scale;
      EXPECT_EQ(far, 0u) << "elements further than a bf16 ulp from the f32 product";
      if (with_bias) {
        EXPECT_THROW(cuda::matmul_forward_bf16(d_out.get(), d_x.get(), d_w.get(), d_b.get(), s.N, s.IC, s.OC, blas,
                                               nullptr),
                     strata::Error)
            << "a bias without the f32 workspace";
      }
    }
}

// Kernels with bf16 products (train_gpt --compute-dtype bf16) on CUDA against the same on the CPU: the operands
// are rounded to nearest-even on both, and products of bf16 values are exact in f32, so the matmuls differ only in
// summation order (kTol). Attention at T <= 32 is one key tile on both backends, so P is rounded at the same running
// maxima; expf and the CPU's exp_f32 may still put a rare P on either side of a bf16 rounding boundary, so attention
// is judged by the root-mean-square error over the tensor.
TEST_F(CudaKernels, Bf16ProductsMatchTheCpu) {
  auto cuda_device = create_device(DeviceKind::kCuda, test::runtime().local_rank() % cuda_device_count(), 60.0);
  auto cpu_device = create_device(DeviceKind::kCpu, 0, 60.0);
  auto gpu = make_kernels(*cuda_device, DType::kBF16);
  auto cpu = make_kernels(*cpu_device, DType::kBF16);
  const auto stream = static_cast<cudaStream_t>(cuda_device->compute_stream().native_handle());
  auto rms = [](const Floats& got, const Floats& want) {
    double num = 0, den = 1e-300;
    for (std::size_t i = 0; i < want.size(); ++i) {
      num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      den += static_cast<double>(want[i]) * want[i];
    }
    return std::sqrt(num / den);
  };

  const int N = 37, IC = 48, OC = 192, V = 101;
  const Floats x = randn(std::size_t(N) * IC, 80), w = randn(std::size_t(IC) * OC, 81, 0.2f), b = randn(OC, 82);
  const Floats dout = randn(std::size_t(N) * OC, 83), wte = randn(std::size_t(V) * IC, 84, 0.2f);
  const Floats dlogits = randn(std::size_t(N) * V, 85);
  Floats out(std::size_t(N) * OC), dx(x.size(), 0.5f), dw(w.size(), 0.25f), db(OC, 0.125f);
  const Floats dx0 = dx, dw0 = dw, db0 = db;
  cpu->matmul_forward(out.data(), x.data(), w.data(), b.data(), N, IC, OC);
  cpu->matmul_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), N, IC, OC);
  Dev d_x(x), d_w(w), d_b(b), d_dout(dout), d_out(out.size()), d_dx(dx0), d_dw(dw0), d_db(db0);
  gpu->matmul_forward(d_out.get(), d_x.get(), d_w.get(), d_b.get(), N, IC, OC);
  gpu->matmul_backward(d_dx.get(), d_dw.get(), d_db.get(), d_dout.get(), d_x.get(), d_w.get(), N, IC, OC);
  EXPECT_CLOSE(d_out.host(stream), out, kTol);
  EXPECT_GRAD_CLOSE(d_dx.host(stream), dx, dx0, kTol);
  EXPECT_GRAD_CLOSE(d_dw.host(stream), dw, dw0, kTol);
  EXPECT_GRAD_CLOSE(d_db.host(stream), db, db0, kTol);

  Floats logits(std::size_t(N) * V), hx(x.size(), 0.0f), dwte(wte.size(), 0.0f);
  cpu->lm_head_forward(logits.data(), x.data(), wte.data(), N, IC, V);
  cpu->lm_head_backward(hx.data(), dwte.data(), dlogits.data(), x.data(), wte.data(), N, IC, V);
  Dev d_wte(wte), d_dlogits(dlogits), d_logits(logits.size()), d_hx(Floats(x.size(), 0.0f)),
      d_dwte(Floats(wte.size(), 0.0f));
  gpu->lm_head_forward(d_logits.get(), d_x.get(), d_wte.get(), N, IC, V);
  gpu->lm_head_backward(d_hx.get(), d_dwte.get(), d_dlogits.get(), d_x.get(), d_wte.get(), N, IC, V);
  EXPECT_CLOSE(d_logits.host(stream), logits, kTol);
  EXPECT_CLOSE(d_hx.host(stream), hx, kTol);
  EXPECT_CLOSE(d_dwte.host(stream), dwte, kTol);

  // Multi-head, then grouped-query attention (whose qkv rows are narrower: the rounded copy must size them so).
  for (const auto [B, T, C, NH, KVH] : {std::array{2, 29, 32, 2, 2}, std::array{2, 29, 64, 4, 2}}) {
    SCOPED_TRACE(shape({{"B", B}, {"T", T}, {"C", C}, {"NH", NH}, {"KVH", KVH}}));
    const std::size_t row = qkv_row(C, NH, KVH);
    const Floats qkv = randn(std::size_t(B) * T * row, 86, 1.5f), ady = randn(std::size_t(B) * T * C, 87);
    Floats y(std::size_t(B) * T * C), lse(std::size_t(B) * NH * T), dqkv(qkv.size(), 0.0f);
    cpu->attention_forward(y.data(), lse.data(), qkv.data(), B, T, C, NH, KVH);
    cpu->attention_backward(dqkv.data(), ady.data(), y.data(), lse.data(), qkv.data(), B, T, C, NH, KVH);
    Dev d_qkv(qkv), d_ady(ady), d_y(y.size()), d_lse(lse.size()), d_dqkv(Floats(qkv.size(), 0.0f));
    gpu->attention_forward(d_y.get(), d_lse.get(), d_qkv.get(), B, T, C, NH, KVH);
    gpu->attention_backward(d_dqkv.get(), d_ady.get(), d_y.get(), d_lse.get(), d_qkv.get(), B, T, C, NH, KVH);
    EXPECT_LE(rms(d_y.host(stream), y), 1e-5);
    EXPECT_CLOSE(d_lse.host(stream), lse, kAttentionTol);
    EXPECT_LE(rms(d_dqkv.host(stream), dqkv), 1e-4);
  }
}

TEST_F(CudaKernels, LmHead) {
  cuda::Blas blas(stream_);
  const int V = 101;
  struct Shape {
    int N, C;
  };
  for (const Shape s : {Shape{1, 48}, Shape{37, 48}, Shape{128, 64}}) {
    SCOPED_TRACE(shape({{"N", s.N}, {"C", s.C}, {"V", V}}));
    const std::size_t NC = static_cast<std::size_t>(s.N) * s.C, NV = static_cast<std::size_t>(s.N) * V;
    const Floats x = randn(NC, 50), wte = randn(static_cast<std::size_t>(V) * s.C, 51, 0.2f);
    Floats logits(NV);
    lm_head_forward(logits.data(), x.data(), wte.data(), s.N, s.C, V);
    Dev d_x(x), d_wte(wte), d_logits(NV);
    cuda::lm_head_forward(d_logits.get(), d_x.get(), d_wte.get(), s.N, s.C, V, blas);
    EXPECT_CLOSE(d_logits.host(stream_), logits, kAttentionTol);

    const Floats dlogits = randn(NV, 52);
    const Floats dx0 = randn(NC, 53, 0.5f), dwte0 = randn(wte.size(), 54, 0.5f);
    Floats dx = dx0, dwte = dwte0;
    lm_head_backward(dx.data(), dwte.data(), dlogits.data(), x.data(), wte.data(), s.N, s.C, V);
    Dev d_dlogits(dlogits), d_dx(dx0), d_dwte(dwte0);
    cuda::lm_head_backward(d_dx.get(), d_dwte.get(), d_dlogits.get(), d_x.get(), d_wte.get(), s.N, s.C, V, blas);
    EXPECT_GRAD_CLOSE(d_dx.host(stream_), dx, dx0, kAttentionTol);
    EXPECT_GRAD_CLOSE(d_dwte.host(stream_), dwte, dwte0, kAttentionTol);
  }
}

// ---- attention ----------------------------------------------------------------------------------------------

struct AttentionShape {
  int B, T, C, NH, KVH;
};
// T = 1, primes, an exact multiple of the 32-row tiles and one past it; D = 16, 48 (a partial second pass over
// the lanes) and 64. Multi-head (KVH = NH), then grouped-query: groups of 2 and 3 query heads, and one kv head for
// all (multi-query).
constexpr AttentionShape kAttentionShapes[] = {
    {2, 1, 48, 3, 3},  {2, 37, 48, 3, 3},  {1, 128, 64, 4, 4},  {2, 33, 64, 1, 1}, {1, 70, 128, 2, 2},
    {1, 45, 96, 2, 2}, {2, 37, 64, 4, 2},  {1, 70, 128, 4, 1},  {2, 33, 96, 6, 3}, {2, 1, 64, 4, 1},
    {1, 45, 192, 4, 2}, {3, 29, 96, 6, 3}};

std::string attention_trace(const AttentionShape& s) {
  return shape({{"B", s.B}, {"T", s.T}, {"C", s.C}, {"NH", s.NH}, {"KVH", s.KVH}});
}

TEST_F(CudaKernels, AttentionForward) {
  for (const AttentionShape s : kAttentionShapes) {
    SCOPED_TRACE(attention_trace(s));
    const std::size_t BT = static_cast<std::size_t>(s.B) * s.T;
    const Floats qkv = randn(BT * qkv_row(s.C, s.NH, s.KVH), 60);
    Floats out(BT * s.C), lse(BT * s.NH);
    attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.KVH);
    Dev d_qkv(qkv), d_out(out.size()), d_lse(lse.size());
    cuda::attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), s.B, s.T, s.C, s.NH, s.KVH, stream_);
    EXPECT_CLOSE(d_out.host(stream_), out, kAttentionTol);
    EXPECT_CLOSE(d_lse.host(stream_), lse, kAttentionTol);
  }
}

// The decode path's attention over its KV cache: a block of queries inside a qkv buffer (row stride 3 C) against keys
// and values of a cache (row stride KVH D, one batch per sequence at a stride of ctx rows), at several positions: one
// query over a long cache (a decode step), a chunk of queries at a later position (a prefill chunk), a block that
// sees no key (out 0, lse -inf), heads of 16, 64, 96 and 256 columns, and grouped-query caches (kv_heads of 2, 1 and
// 3 for 4, 4 and 6 query heads; 0 is as many as heads).
TEST_F(CudaKernels, AttentionBlockForward) {
  struct Case {
    int batch, heads, width, q_rows, q_pos, kv_rows, kv_pos, kv_heads;
  };
  const Case cases[] = {{3, 4, 64, 1, 130, 131, 0, 0}, {2, 2, 128, 37, 40, 77, 0, 2}, {1, 1, 96, 5, 0, 9, 20, 0},
                        {2, 3, 768, 2, 9, 11, 0, 0},   {1, 1, 256, 70, 3, 73, 0, 1}, {3, 4, 64, 1, 130, 131, 0, 2},
                        {2, 4, 128, 37, 40, 77, 0, 1}, {1, 6, 96, 5, 0, 9, 20, 3},   {2, 6, 192, 33, 0, 33, 0, 3}};
  for (const Case c : cases) {
    SCOPED_TRACE(shape({{"batch", c.batch}, {"heads", c.heads}, {"width", c.width}, {"q_rows", c.q_rows},
                        {"q_pos", c.q_pos}, {"kv_rows", c.kv_rows}, {"kv_pos", c.kv_pos}, {"kv_heads", c.kv_heads}}));
    AttentionBlock blk{c.batch, c.heads, c.width, c.q_rows, c.q_pos, c.kv_rows, c.kv_pos};
    blk.kv_heads = c.kv_heads;
    const std::size_t C = static_cast<std::size_t>(c.width), ctx = static_cast<std::size_t>(c.kv_rows) + 3;
    const std::size_t KV = static_cast<std::size_t>(blk.kv_width());  // a k or v row of the cache
    const std::size_t q_bs = static_cast<std::size_t>(c.q_rows) * 3 * C, kv_bs = ctx * KV;
    const Floats q = randn(static_cast<std::size_t>(c.batch) * q_bs, 70);
    const Floats k = randn(static_cast<std::size_t>(c.batch) * kv_bs, 71), v = randn(k.size(), 72);
    const std::size_t out_n = static_cast<std::size_t>(c.batch) * c.q_rows * C;
    const std::size_t lse_n = static_cast<std::size_t>(c.batch) * c.heads * c.q_rows;
    Floats out(out_n), lse(lse_n);
    const std::size_t lse_hs = static_cast<std::size_t>(c.q_rows), lse_bs = lse_hs * c.heads;
    attention_block_forward(blk, RowsOut{out.data(), C, c.q_rows * C}, RowStatsOut{lse.data(), lse_hs, lse_bs},
                            Rows{q.data(), 3 * C, q_bs}, Rows{k.data(), KV, kv_bs}, Rows{v.data(), KV, kv_bs});
    Dev d_q(q), d_k(k), d_v(v), d_out(out_n), d_lse(lse_n);
    cuda::attention_block_forward(blk, RowsOut{d_out.get(), C, c.q_rows * C}, RowStatsOut{d_lse.get(), lse_hs, lse_bs},
                                  Rows{d_q.get(), 3 * C, q_bs}, Rows{d_k.get(), KV, kv_bs},
                                  Rows{d_v.get(), KV, kv_bs}, stream_);
    EXPECT_CLOSE(d_out.host(stream_), out, kAttentionTol);
    const Floats got_lse = d_lse.host(stream_);
    for (std::size_t i = 0; i < lse_n; ++i) {
      if (std::isinf(lse[i])) {
        EXPECT_TRUE(std::isinf(got_lse[i]) && got_lse[i] < 0) << "lse " << i << ": " << got_lse[i];
      } else {
        EXPECT_NEAR(got_lse[i], lse[i], kAttentionTol * std::max(1.0f, std::fabs(lse[i]))) << "lse " << i;
      }
    }
  }
}

TEST_F(CudaKernels, CopyRows) {
  const int batch = 3, rows = 5, columns = 37;
  const std::size_t src_rs = 40, src_bs = 7 * src_rs, dst_rs = 50, dst_bs = 6 * dst_rs;
  const Floats src = randn(batch * src_bs, 73), base = randn(batch * dst_bs, 74);
  for (bool add : {false, true}) {
    Floats want = base;
    copy_rows(RowsOut{want.data(), dst_rs, dst_bs}, Rows{src.data(), src_rs, src_bs}, batch, rows, columns, add);
    Dev d_src(src), d_dst(base);
    cuda::copy_rows(RowsOut{d_dst.get(), dst_rs, dst_bs}, Rows{d_src.get(), src_rs, src_bs}, batch, rows, columns, add,
                    stream_);
    EXPECT_EQ(d_dst.host(stream_), want) << (add ? "add" : "copy");  // exact: one add per element, or none
  }
}

TEST_F(CudaKernels, AttentionBackward) {
  for (const AttentionShape s : kAttentionShapes) {
    SCOPED_TRACE(attention_trace(s));
    const std::size_t BT = static_cast<std::size_t>(s.B) * s.T, row = qkv_row(s.C, s.NH, s.KVH);
    const Floats qkv = randn(BT * row, 70);
    Floats out(BT * s.C), lse(BT * s.NH);
    attention_forward(out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.KVH);
    const Floats dout = randn(out.size(), 71), dqkv0 = randn(qkv.size(), 72, 0.5f);
    Floats dqkv = dqkv0;
    attention_backward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.KVH);
    // From the CPU's out and lse, so the backward is judged on its own.
    Dev d_qkv(qkv), d_out(out), d_lse(lse), d_dout(dout), d_dqkv(dqkv0);
    cuda::attention_backward(d_dqkv.get(), d_dout.get(), d_out.get(), d_lse.get(), d_qkv.get(), s.B, s.T, s.C, s.NH,
                             s.KVH, stream_);
    const Floats got = d_dqkv.host(stream_);
    EXPECT_GRAD_CLOSE(got, dqkv, dqkv0, kAttentionTol);
    // q, k and v come from different kernels: check each part against its own scale. Not at T = 1: a softmax over
    // one key has no gradient, so dq and dk get exactly 0 on the CPU and rounding noise (~1e-8) here.
    const std::size_t kv_width = row - s.C;
    const std::size_t part_begin[] = {0, static_cast<std::size_t>(s.C), s.C + kv_width / 2, row};
    for (int part = 0; part < 3 && s.T > 1; ++part) {
      Floats g, want, base;
      for (std::size_t r = 0; r < BT; ++r)
        for (std::size_t c = part_begin[part]; c < part_begin[part + 1]; ++c) {
          const std::size_t i = r * row + c;
          g.push_back(got[i]);
          want.push_back(dqkv[i]);
          base.push_back(dqkv0[i]);
        }
      EXPECT_GRAD_CLOSE(g, want, base, kAttentionTol) << " (part " << "qkv"[part] << ")";
    }
  }
}

// ---- elementwise --------------------------------------------------------------------------------------------

TEST_F(CudaKernels, Gelu) {
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{4099}}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    Floats x = randn(n, 80, 3.0f);
    if (n > 2) x[0] = -12.0f, x[1] = 12.0f;  // the capped exponent and the saturated side
    Floats out(n);
    gelu_forward(out.data(), x.data(), n);
    Dev d_x(x), d_out(n);
    cuda::gelu_forward(d_out.get(), d_x.get(), n, stream_);
    EXPECT_CLOSE(d_out.host(stream_), out, kTol);
    Dev d_inplace(x);
    cuda::gelu_forward(d_inplace.get(), d_inplace.get(), n, stream_);
    EXPECT_CLOSE(d_inplace.host(stream_), out, kTol);

    const Floats dout = randn(n, 81), dx0 = randn(n, 82, 0.5f);
    Floats dx = dx0;
    gelu_backward(dx.data(), x.data(), dout.data(), n);
    Dev d_dout(dout), d_dx(dx0);
    cuda::gelu_backward(d_dx.get(), d_x.get(), d_dout.get(), n, stream_);
    EXPECT_GRAD_CLOSE(d_dx.host(stream_), dx, dx0, kTol);
  }
}

TEST_F(CudaKernels, Residual) {
  const std::size_t n = 5003;
  const Floats a = randn(n, 90), b = randn(n, 91);
  Floats out(n);
  residual_forward(out.data(), a.data(), b.data(), n);
  Dev d_a(a), d_b(b), d_out(n);
  cuda::residual_forward(d_out.get(), d_a.get(), d_b.get(), n, stream_);
  EXPECT_EQ(d_out.host(stream_), out);  // one rounding, same on both
  cuda::residual_forward(d_a.get(), d_a.get(), d_b.get(), n, stream_);  // in place
  EXPECT_EQ(d_a.host(stream_), out);
}

// ---- loss ---------------------------------------------------------------------------------------------------

TEST_F(CudaKernels, CrossEntropySoftmax) {
  struct Shape {
    int N, V;
  };
  for (const Shape s : {Shape{1, 101}, Shape{37, 101}, Shape{16, 5003}}) {
    SCOPED_TRACE(shape({{"N", s.N}, {"V", s.V}}));
    const std::size_t NV = static_cast<std::size_t>(s.N) * s.V;
    const Floats logits = randn(NV, 100, 3.0f);
    const Tokens targets = rand_tokens(s.N, s.V, 101);
    const float dscale = 1.0f / static_cast<float>(s.N);
    Floats losses(s.N), dlogits(NV);
    crossentropy_softmax(losses.data(), dlogits.data(), logits.data(), targets.data(), s.N, s.V, dscale);
    DeviceArray<int32_t> d_targets(targets);
    Dev d_logits(logits), d_losses(s.N), d_dlogits(NV);
    cuda::crossentropy_softmax(d_losses.get(), d_dlogits.get(), d_logits.get(), d_targets.get(), s.N, s.V, dscale,
                               stream_);
    EXPECT_CLOSE(d_losses.host(stream_), losses, kTol);
    EXPECT_CLOSE(d_dlogits.host(stream_), dlogits, kTol);

    Dev d_losses_only(s.N);  // no dlogits
    cuda::crossentropy_softmax(d_losses_only.get(), nullptr, d_logits.get(), d_targets.get(), s.N, s.V, dscale,
                               stream_);
    EXPECT_CLOSE(d_losses_only.host(stream_), losses, kTol);

    Dev d_inplace(logits), d_losses_inplace(s.N);  // dlogits == logits
    cuda::crossentropy_softmax(d_losses_inplace.get(), d_inplace.get(), d_inplace.get(), d_targets.get(), s.N, s.V,
                               dscale, stream_);
    EXPECT_CLOSE(d_losses_inplace.host(stream_), losses, kTol);
    EXPECT_CLOSE(d_inplace.host(stream_), dlogits, kTol);
  }
}

TEST_F(CudaKernels, CrossEntropyTargetOutsideTheVocabularyGivesNaN) {
  const int N = 3, V = 101;
  const Floats logits = randn(static_cast<std::size_t>(N) * V, 110);
  const Tokens targets = {5, V, 7};
  DeviceArray<int32_t> d_targets(targets);
  Dev d_logits(logits), d_losses(N), d_dlogits(logits.size());
  cuda::crossentropy_softmax(d_losses.get(), d_dlogits.get(), d_logits.get(), d_targets.get(), N, V, 1.0f, stream_);
  const Floats losses = d_losses.host(stream_), dlogits = d_dlogits.host(stream_);
  EXPECT_TRUE(std::isfinite(losses[0]));
  EXPECT_TRUE(std::isnan(losses[1]));
  EXPECT_TRUE(std::isfinite(losses[2]));
  EXPECT_TRUE(std::isnan(dlogits[V]));
  EXPECT_TRUE(std::isfinite(dlogits[2 * V]));
}

// ---- tensor parallelism -------------------------------------------------------------------------------------

// This rank's rows of a 101-token vocabulary: [40, 70). Tokens come from the whole vocabulary, so most select no
// local row (a zero embedding, no gradient) and the local ones repeat; the first rows take the range's edges.
constexpr int kTpVocab = 101, kTpBegin = 40, kTpCount = 30;

Tokens tp_tokens(std::size_t n, unsigned seed) {
  Tokens t = rand_tokens(n, kTpVocab, seed);
  const int32_t edges[] = {kTpBegin, kTpBegin + kTpCount - 1, kTpBegin - 1, kTpBegin + kTpCount};
  for (std::size_t i = 0; i < n && i < 4; ++i) t[i] = edges[i];
  return t;
}

struct RowsShape {
  int N, C;
};
constexpr RowsShape kTpRowShapes[] = {{1, 48}, {37, 48}, {300, 64}, {75, 333}};

// The embedding, position and bias kernels make the CPU's additions in the CPU's order: equal to the bit.
TEST_F(CudaKernels, EmbeddingForward) {
  for (const RowsShape s : kTpRowShapes) {
    SCOPED_TRACE(shape({{"N", s.N}, {"C", s.C}}));
    const Tokens tokens = tp_tokens(s.N, 140);
    const Floats wte = randn(static_cast<std::size_t>(kTpCount) * s.C, 141);
    Floats out(static_cast<std::size_t>(s.N) * s.C);
    embedding_forward(out.data(), tokens.data(), wte.data(), kTpBegin, kTpCount, s.N, s.C);
    DeviceArray<int32_t> d_tokens(tokens);
    Dev d_wte(wte), d_out(out.size());  // NaN-filled: rows outside the range must be written too
    cuda::embedding_forward(d_out.get(), d_tokens.get(), d_wte.get(), kTpBegin, kTpCount, s.N, s.C, stream_);
    EXPECT_EQ(d_out.host(stream_), out);
  }
}

TEST_F(CudaKernels, EmbeddingBackward) {
  for (const RowsShape s : kTpRowShapes) {
    SCOPED_TRACE(shape({{"N", s.N}, {"C", s.C}}));
    const Tokens tokens = tp_tokens(s.N, 150);
    const Floats dout = randn(static_cast<std::size_t>(s.N) * s.C, 151);
    const Floats dwte0 = randn(static_cast<std::size_t>(kTpCount) * s.C, 152, 0.5f);
    Floats dwte = dwte0;
    embedding_backward(dwte.data(), dout.data(), tokens.data(), kTpBegin, kTpCount, s.N, s.C);
    DeviceArray<int32_t> d_tokens(tokens);
    Dev d_dout(dout), d_dwte(dwte0);
    cuda::embedding_backward(d_dwte.get(), d_dout.get(), d_tokens.get(), kTpBegin, kTpCount, s.N, s.C, stream_);
    EXPECT_EQ(d_dwte.host(stream_), dwte);
  }
}

// This rank's T positions of the sequence start at t0; wpe has rows before and after them, which stay untouched.
struct PositionShape {
  int B, T, t0, C;
};
constexpr PositionShape kPositionShapes[] = {{1, 1, 0, 48}, {2, 37, 5, 48}, {3, 64, 64, 64}, {4, 9, 3, 333}};

TEST_F(CudaKernels, PositionForward) {
  for (const PositionShape s : kPositionShapes) {
    SCOPED_TRACE(shape({{"B", s.B}, {"T", s.T}, {"t0", s.t0}, {"C", s.C}}));
    const Floats wpe = randn(static_cast<std::size_t>(s.t0 + s.T + 3) * s.C, 160);
    const Floats out0 = randn(static_cast<std::size_t>(s.B) * s.T * s.C, 161);
    Floats out = out0;
    position_forward(out.data(), wpe.data(), s.B, s.T, s.t0, s.C);
    Dev d_wpe(wpe), d_out(out0);
    cuda::position_forward(d_out.get(), d_wpe.get(), s.B, s.T, s.t0, s.C, stream_);
    EXPECT_EQ(d_out.host(stream_), out);
  }
}

TEST_F(CudaKernels, PositionBackward) {
  for (const PositionShape s : kPositionShapes) {
    SCOPED_TRACE(shape({{"B", s.B}, {"T", s.T}, {"t0", s.t0}, {"C", s.C}}));
    const Floats dout = randn(static_cast<std::size_t>(s.B) * s.T * s.C, 170);
    const Floats dwpe0 = randn(static_cast<std::size_t>(s.t0 + s.T + 3) * s.C, 171, 0.5f);
    Floats dwpe = dwpe0;
    position_backward(dwpe.data(), dout.data(), s.B, s.T, s.t0, s.C);
    Dev d_dout(dout), d_dwpe(dwpe0);
    cuda::position_backward(d_dwpe.get(), d_dout.get(), s.B, s.T, s.t0, s.C, stream_);
    EXPECT_EQ(d_dwpe.host(stream_), dwpe);
  }
}

TEST_F(CudaKernels, AddBias) {
  for (const RowsShape s : kTpRowShapes) {
    SCOPED_TRACE(shape({{"N", s.N}, {"C", s.C}}));
    const Floats bias = randn(s.C, 180), out0 = randn(static_cast<std::size_t>(s.N) * s.C, 181);
    Floats out = out0;
    add_bias(out.data(), bias.data(), s.N, s.C);
    Dev d_bias(bias), d_out(out0);
    cuda::add_bias(d_out.get(), d_bias.get(), s.N, s.C, stream_);
    EXPECT_EQ(d_out.host(stream_), out);
  }
}

// This rank's V logit columns from vocabulary column v_begin, the first `valid` real. The padded columns hold large
// logits, which must enter neither the max nor the sum. The first rows' targets are: the first and last valid
// column, a padded column, the column before v_begin and the one after the slice (the last three not this rank's).
struct VocabShape {
  int N, V, valid, v_begin;
};
constexpr VocabShape kVocabShapes[] = {{1, 101, 101, 0}, {37, 101, 97, 202}, {16, 5003, 4999, 5003}, {9, 64, 60, 64}};

struct VocabCase {
  Floats logits;
  Tokens targets;
};

VocabCase vocab_case(const VocabShape& s, unsigned seed) {
  VocabCase c{randn(static_cast<std::size_t>(s.N) * s.V, seed, 3.0f),
              rand_tokens(s.N, s.v_begin + s.V + 50, seed + 1)};
  for (std::size_t n = 0; n < static_cast<std::size_t>(s.N); ++n)
    for (int v = s.valid; v < s.V; ++v) c.logits[n * s.V + v] = 50.0f;
  const int32_t edges[] = {s.v_begin, s.v_begin + s.valid - 1, s.v_begin + s.valid, s.v_begin - 1, s.v_begin + s.V};
  for (int n = 0; n < s.N && n < 5; ++n) c.targets[n] = edges[n];
  return c;
}

std::string vocab_trace(const VocabShape& s) {
  return shape({{"N", s.N}, {"V", s.V}, {"valid", s.valid}, {"v_begin", s.v_begin}});
}

TEST_F(CudaKernels, VocabMax) {
  for (const VocabShape s : kVocabShapes) {
    SCOPED_TRACE(vocab_trace(s));
    const VocabCase c = vocab_case(s, 190);
    Floats row_max(s.N);
    vocab_max(row_max.data(), c.logits.data(), s.N, s.V, s.valid);
    Dev d_logits(c.logits), d_row_max(s.N);
    cuda::vocab_max(d_row_max.get(), d_logits.get(), s.N, s.V, s.valid, stream_);
    EXPECT_EQ(d_row_max.host(stream_), row_max);  // a max is exact
  }
}

TEST_F(CudaKernels, VocabSumExp) {
  for (const VocabShape s : kVocabShapes) {
    SCOPED_TRACE(vocab_trace(s));
    const VocabCase c = vocab_case(s, 200);
    Floats row_max(s.N), stats(2 * static_cast<std::size_t>(s.N));
    vocab_max(row_max.data(), c.logits.data(), s.N, s.V, s.valid);
    vocab_sumexp(stats.data(), c.logits.data(), row_max.data(), c.targets.data(), s.v_begin, s.N, s.V, s.valid);
    // From the CPU's row maxima, so the sums are judged on their own.
    DeviceArray<int32_t> d_targets(c.targets);
    Dev d_logits(c.logits), d_row_max(row_max), d_stats(stats.size());
    cuda::vocab_sumexp(d_stats.get(), d_logits.get(), d_row_max.get(), d_targets.get(), s.v_begin, s.N, s.V, s.valid,
                       stream_);
    const Floats got = d_stats.host(stream_);
    const Floats got_sums(got.begin(), got.begin() + s.N), want_sums(stats.begin(), stats.begin() + s.N);
    const Floats got_targets(got.begin() + s.N, got.end()), want_targets(stats.begin() + s.N, stats.end());
    EXPECT_CLOSE(got_sums, want_sums, kTol);
    EXPECT_EQ(got_targets, want_targets);  // copies of logits, or 0
  }
}

TEST_F(CudaKernels, VocabCrossEntropy) {
  for (const VocabShape s : kVocabShapes) {
    SCOPED_TRACE(vocab_trace(s));
    const VocabCase c = vocab_case(s, 210);
    const std::size_t NV = static_cast<std::size_t>(s.N) * s.V;
    const float dscale = 1.0f / static_cast<float>(s.N);
    Floats row_max(s.N), stats(2 * static_cast<std::size_t>(s.N)), losses(s.N), dlogits(NV);
    vocab_max(row_max.data(), c.logits.data(), s.N, s.V, s.valid);
    vocab_sumexp(stats.data(), c.logits.data(), row_max.data(), c.targets.data(), s.v_begin, s.N, s.V, s.valid);
    vocab_crossentropy(losses.data(), dlogits.data(), c.logits.data(), row_max.data(), stats.data(),
                       c.targets.data(), s.v_begin, s.N, s.V, s.valid, dscale);
    // From the CPU's row maxima and statistics, so the last pass is judged on its own.
    DeviceArray<int32_t> d_targets(c.targets);
    Dev d_logits(c.logits), d_row_max(row_max), d_stats(stats), d_losses(s.N), d_dlogits(NV);
    cuda::vocab_crossentropy(d_losses.get(), d_dlogits.get(), d_logits.get(), d_row_max.get(), d_stats.get(),
                             d_targets.get(), s.v_begin, s.N, s.V, s.valid, dscale, stream_);
    EXPECT_CLOSE(d_losses.host(stream_), losses, kTol);
    const Floats got = d_dlogits.host(stream_);
    EXPECT_CLOSE(got, dlogits, kTol);
    std::size_t nonzero_pads = 0;
    for (std::size_t n = 0; n < static_cast<std::size_t>(s.N); ++n)
      for (int v = s.valid; v < s.V; ++v) nonzero_pads += got[n * s.V + v] != 0.0f;
    EXPECT_EQ(nonzero_pads, 0u) << "the padded columns' gradient must be exactly 0";

    Dev d_losses_only(s.N);  // no dlogits
    cuda::vocab_crossentropy(d_losses_only.get(), nullptr, d_logits.get(), d_row_max.get(), d_stats.get(),
                             d_targets.get(), s.v_begin, s.N, s.V, s.valid, dscale, stream_);
    EXPECT_CLOSE(d_losses_only.host(stream_), losses, kTol);

    Dev d_inplace(c.logits), d_losses_inplace(s.N);  // dlogits == logits
    cuda::vocab_crossentropy(d_losses_inplace.get(), d_inplace.get(), d_inplace.get(), d_row_max.get(), d_stats.get(),
                             d_targets.get(), s.v_begin, s.N, s.V, s.valid, dscale, stream_);
    EXPECT_CLOSE(d_losses_inplace.host(stream_), losses, kTol);
    EXPECT_CLOSE(d_inplace.host(stream_), dlogits, kTol);
  }
}

TEST_F(CudaKernels, TensorParallelEmptyInputsEnqueueNothing) {
  Dev w(64 * 64), g(64 * 64);  // parameters and their gradients: must stay untouched (NaN bytes)
  const Floats before = g.host(stream_);
  cuda::embedding_forward(nullptr, nullptr, w.get(), 0, 64, 0, 64, stream_);
  cuda::embedding_backward(g.get(), nullptr, nullptr, 0, 64, 0, 64, stream_);
  cuda::embedding_backward(g.get(), nullptr, nullptr, 0, 0, 16, 64, stream_);
  cuda::position_forward(nullptr, w.get(), 0, 4, 0, 64, stream_);
  cuda::position_backward(g.get(), nullptr, 0, 4, 0, 64, stream_);
  cuda::position_backward(g.get(), nullptr, 2, 0, 3, 64, stream_);
  cuda::add_bias(nullptr, w.get(), 0, 64, stream_);
  cuda::vocab_max(nullptr, nullptr, 0, 64, 60, stream_);
  cuda::vocab_sumexp(nullptr, nullptr, nullptr, nullptr, 0, 0, 64, 60, stream_);
  cuda::vocab_crossentropy(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, 64, 60, 1.0f, stream_);
  const Floats after = g.host(stream_);
  EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)), 0);

  EXPECT_EQ(test::error_code_of([&] { cuda::vocab_max(nullptr, nullptr, 1, 64, 65, stream_); }),
            ErrorCode::kInvalidArgument)
      << "valid > V";
  EXPECT_EQ(test::error_code_of([&] { cuda::position_forward(nullptr, nullptr, 1, 4, -1, 64, stream_); }),
            ErrorCode::kInvalidArgument)
      << "t0 < 0";
  EXPECT_EQ(test::error_code_of([&] { cuda::embedding_forward(nullptr, nullptr, nullptr, 0, -1, 1, 64, stream_); }),
            ErrorCode::kInvalidArgument)
      << "v_count < 0";
}

// ---- edge cases and repeatability ---------------------------------------------------------------------------

TEST_F(CudaKernels, EmptyInputsEnqueueNothing) {
  cuda::Blas blas(stream_);
  Dev w(64 * 64), g(64 * 64);  // parameters and their gradients: must stay untouched (NaN bytes)
  const Floats before = g.host(stream_);
  cuda::encoder_forward(nullptr, nullptr, w.get(), w.get(), 0, 4, 64, stream_);
  cuda::encoder_backward(g.get(), g.get(), nullptr, nullptr, 0, 4, 64, stream_);
  cuda::encoder_backward(g.get(), g.get(), nullptr, nullptr, 2, 0, 64, stream_);
  cuda::layernorm_forward(nullptr, nullptr, nullptr, nullptr, w.get(), w.get(), 0, 64, stream_);
  cuda::layernorm_backward(nullptr, g.get(), g.get(), nullptr, nullptr, w.get(), nullptr, nullptr, 0, 64, stream_);
  cuda::matmul_forward(nullptr, nullptr, w.get(), w.get(), 0, 64, 64, blas);
  cuda::matmul_backward(nullptr, g.get(), g.get(), nullptr, nullptr, w.get(), 0, 64, 64, blas);
  cuda::lm_head_forward(nullptr, nullptr, w.get(), 0, 64, 64, blas);
  cuda::lm_head_backward(nullptr, g.get(), nullptr, nullptr, w.get(), 0, 64, 64, blas);
  cuda::attention_forward(nullptr, nullptr, nullptr, 0, 16, 64, 4, 4, stream_);
  cuda::attention_forward(nullptr, nullptr, nullptr, 2, 0, 64, 4, 2, stream_);
  cuda::attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 16, 64, 4, 1, stream_);
  cuda::rmsnorm_forward(nullptr, nullptr, nullptr, w.get(), 0, 64, 1e-5f, stream_);
  cuda::rmsnorm_backward(nullptr, g.get(), nullptr, nullptr, w.get(), nullptr, 0, 64, stream_);
  cuda::rope_forward(nullptr, w.get(), w.get(), 0, 4, 2, 16, 0, 64, 256, stream_);
  cuda::rope_backward(nullptr, w.get(), w.get(), 2, 0, 2, 16, 3, 64, 256, stream_);
  cuda::rope_forward(g.get(), w.get(), w.get(), 2, 4, 0, 16, 0, 64, 256, stream_);  // no heads
  cuda::swiglu_forward(nullptr, nullptr, 0, 64, stream_);
  cuda::swiglu_backward(nullptr, nullptr, nullptr, 0, 64, stream_);
  cuda::swiglu_backward(g.get(), nullptr, nullptr, 16, 0, stream_);
  cuda::gelu_forward(nullptr, nullptr, 0, stream_);
  cuda::gelu_backward(nullptr, nullptr, nullptr, 0, stream_);
  cuda::residual_forward(nullptr, nullptr, nullptr, 0, stream_);
  cuda::crossentropy_softmax(nullptr, nullptr, nullptr, nullptr, 0, 64, 1.0f, stream_);
  const Floats after = g.host(stream_);
  EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)), 0);
}

TEST_F(CudaKernels, RejectsBadShapes) {
  EXPECT_EQ(test::error_code_of([&] { cuda::attention_forward(nullptr, nullptr, nullptr, 1, 4, 50, 3, 3, stream_); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(test::error_code_of([&] {
              cuda::layernorm_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, -1, 8, stream_);
            }),
            ErrorCode::kInvalidArgument);
  // A head size whose tiles do not fit in shared memory is refused before launch.
  EXPECT_EQ(
      test::error_code_of([&] { cuda::attention_forward(nullptr, nullptr, nullptr, 1, 4, 4096, 1, 1, stream_); }),
      ErrorCode::kUnsupported);
  for (int kvh : {0, 3, 8, -2})  // KVH must divide NH = 4
    EXPECT_EQ(test::error_code_of([&] {
                cuda::attention_backward(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 4, 64, 4, kvh, stream_);
              }),
              ErrorCode::kInvalidArgument)
        << "KVH = " << kvh;
  EXPECT_EQ(test::error_code_of([&] {
              AttentionBlock blk{1, 4, 64, 1, 0, 1, 0};
              blk.kv_heads = 3;
              cuda::attention_block_forward(blk, RowsOut{}, RowStatsOut{}, Rows{}, Rows{}, Rows{}, stream_);
            }),
            ErrorCode::kInvalidArgument)
      << "kv_heads = 3 of 4 heads";
  EXPECT_EQ(
      test::error_code_of([&] { cuda::rmsnorm_forward(nullptr, nullptr, nullptr, nullptr, 4, 0, 1e-5f, stream_); }),
      ErrorCode::kInvalidArgument)
      << "rmsnorm C = 0";
  EXPECT_EQ(
      test::error_code_of([&] { cuda::rmsnorm_forward(nullptr, nullptr, nullptr, nullptr, 4, 8, -1e-5f, stream_); }),
      ErrorCode::kInvalidArgument)
      << "rmsnorm eps < 0";
  EXPECT_EQ(test::error_code_of(
                [&] { cuda::rope_forward(nullptr, nullptr, nullptr, 1, 4, 2, 15, 0, 30, 120, stream_); }),
            ErrorCode::kInvalidArgument)
      << "rope D odd";
  EXPECT_EQ(test::error_code_of(
                [&] { cuda::rope_backward(nullptr, nullptr, nullptr, 1, 4, 2, 16, -1, 32, 128, stream_); }),
            ErrorCode::kInvalidArgument)
      << "rope pos0 < 0";
  EXPECT_EQ(test::error_code_of(
                [&] { cuda::rope_forward(nullptr, nullptr, nullptr, 1, 4, 2, 16, 0, 31, 128, stream_); }),
            ErrorCode::kInvalidArgument)
      << "rope rows overlapping";
  EXPECT_EQ(test::error_code_of([&] { cuda::swiglu_forward(nullptr, nullptr, -1, 8, stream_); }),
            ErrorCode::kInvalidArgument)
      << "swiglu N < 0";
}

// No float atomics: the same inputs give the same bits, run after run (parameter gradients included).
TEST_F(CudaKernels, BackwardsAreBitwiseRepeatable) {
  const int B = 2, T = 70, C = 64, NH = 4, V = 101;
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * C;
  const Tokens tokens = rand_tokens(BT, V, 120);
  const Floats dout = randn(BTC, 121), x = randn(BTC, 122), w = randn(C, 123), mean = randn(BT, 124);
  const Floats rstd(BT, 0.7f), qkv = randn(BT * 3 * C, 125), dout_attn = randn(BTC, 126);
  Floats out(BTC), lse(BT * NH);
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, NH);
  // Grouped-query attention (two query heads a kv head): each kv head's dk and dv sum two heads' terms.
  const int KVH = 2;
  const Floats gqa_qkv = randn(BT * qkv_row(C, NH, KVH), 127);
  Floats gqa_out(BTC), gqa_lse(BT * NH);
  attention_forward(gqa_out.data(), gqa_lse.data(), gqa_qkv.data(), B, T, C, NH, KVH);
  auto run = [&] {
    DeviceArray<int32_t> d_tokens(tokens);
    Dev d_dout(dout), d_x(x), d_w(w), d_mean(mean), d_rstd(rstd), d_qkv(qkv), d_out(out), d_lse(lse), d_da(dout_attn);
    Dev z_dwte(Floats(static_cast<std::size_t>(V) * C, 0.0f)), z_dwpe(Floats(static_cast<std::size_t>(T) * C, 0.0f));
    Dev z_dx(Floats(BTC, 0.0f)), z_dw(Floats(C, 0.0f)), z_db(Floats(C, 0.0f)), z_dqkv(Floats(BT * 3 * C, 0.0f));
    Dev g_qkv(gqa_qkv), g_out(gqa_out), g_lse(gqa_lse), z_gqa(Floats(gqa_qkv.size(), 0.0f));
    Dev z_rms_dx(Floats(BTC, 0.0f)), z_rms_dw(Floats(C, 0.0f));
    cuda::encoder_backward(z_dwte.get(), z_dwpe.get(), d_dout.get(), d_tokens.get(), B, T, C, stream_);
    cuda::layernorm_backward(z_dx.get(), z_dw.get(), z_db.get(), d_dout.get(), d_x.get(), d_w.get(), d_mean.get(),
                             d_rstd.get(), static_cast<int>(BT), C, stream_);
    cuda::rmsnorm_backward(z_rms_dx.get(), z_rms_dw.get(), d_dout.get(), d_x.get(), d_w.get(), d_rstd.get(),
                           static_cast<int>(BT), C, stream_);
    cuda::attention_backward(z_dqkv.get(), d_da.get(), d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH, NH,
                             stream_);
    cuda::attention_backward(z_gqa.get(), d_da.get(), g_out.get(), g_lse.get(), g_qkv.get(), B, T, C, NH, KVH,
                             stream_);
    std::vector<Floats> results;
    for (const Dev* d : {&z_dwte, &z_dwpe, &z_dx, &z_dw, &z_db, &z_dqkv, &z_gqa, &z_rms_dx, &z_rms_dw})
      results.push_back(d->host(stream_));
    return results;
  };
  const auto first = run();
  for (int rep = 0; rep < 3; ++rep) {
    const auto again = run();
    for (std::size_t k = 0; k < first.size(); ++k)
      EXPECT_EQ(std::memcmp(first[k].data(), again[k].data(), first[k].size() * sizeof(float)), 0)
          << "result " << k << " differs on repetition " << rep;
  }
}

}  // namespace
}  // namespace strata
