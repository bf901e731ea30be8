// The column- and row-parallel products over bf16 activations (runtime/tensor/parallel_linear.h) against the same
// pair over f32 ones: a column-parallel product, then a row-parallel one, forward and backward on the CPU kernel
// table, with and without sequence parallelism, at tp = np. The bf16 pair is the f32 pair's within bf16 rounding and
// moves half its bytes; kernels without bf16 activations refuse them by name; a pass over fewer rows (a decode step's)
// multiplies and reduces those rows alone.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "kernels/kernel_table.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/tensor/parallel_linear.h"
#include "runtime/tensor/tensor_parallel.h"
#include "tests/runtime/tensor/random_values.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::runtime;

constexpr int kB = 2, kIn = 6, kOut = 5;

std::vector<float> uniform(std::size_t n, unsigned seed) { return test::uniform_values(n, seed, 1.0f, false); }
std::vector<float> bf16_uniform(std::size_t n, unsigned seed) { return test::uniform_values(n, seed, 1.0f, true); }

template <typename T>
std::vector<T> as(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<T, float>)
      out[i] = v[i];
    else
      out[i] = Bf16::from(v[i]);
  }
  return out;
}

template <typename T>
std::vector<float> widened(const T* p, std::size_t n) {
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, float>)
      out[i] = p[i];
    else
      out[i] = p[i].value();
  }
  return out;
}

// What one pass returns: the output (this rank's rows), the input gradient (its rows), the weight and bias
// gradients, and the bytes the tp collectives moved.
struct Pass {
  std::vector<float> y, dx, dw1, db1, dw2, db2;
  std::uint64_t bytes = 0;
};

// x [rows, in] whole (the same on every rank), dy [rows, out] whole; weights whole [in, H] and [H, out].
template <typename T>
Pass run_pair(Communicator& group, LinearKernels& k, bool sp, int T_len, int hidden, const std::vector<float>& x,
              const std::vector<float>& dy, const std::vector<float>& w1, const std::vector<float>& b1,
              const std::vector<float>& w2, const std::vector<float>& b2) {
  Device& dev = runtime().device();
  TensorParallel tp(dev, &group, sp, kB, T_len, std::max(hidden, kIn));
  ColumnParallelLinear col(tp, k, kIn, hidden);
  RowParallelLinear row(tp, k, hidden, kOut);
  const int hl = col.local_out(), rows = tp.rows(), local = tp.local_rows(), r = tp.rank();
  // This rank's slices: w1's columns [r hl, (r + 1) hl), b1's, w2's rows.
  std::vector<float> w1l(static_cast<std::size_t>(kIn) * hl), b1l(b1.begin() + r * hl, b1.begin() + (r + 1) * hl);
  for (int i = 0; i < kIn; ++i) std::copy_n(w1.begin() + i * hidden + r * hl, hl, w1l.begin() + i * hl);
  std::vector<float> w2l(w2.begin() + r * hl * kOut, w2.begin() + (r + 1) * hl * kOut);
  // This rank's rows of a whole [rows, C] array (sequence parallelism: positions [r T/tp, (r + 1) T/tp) of each row).
  auto local_rows = [&](const std::vector<float>& whole, int C) {
    if (!sp) return whole;
    std::vector<float> out;
    const int per = T_len / tp.size();
    for (int b = 0; b < kB; ++b)
      out.insert(out.end(), whole.begin() + (b * T_len + r * per) * C, whole.begin() + (b * T_len + (r + 1) * per) * C);
    return out;
  };
  std::vector<T> xl = as<T>(local_rows(x, kIn)), dyl = as<T>(local_rows(dy, kOut));
  std::vector<T> gathered(static_cast<std::size_t>(rows) * kIn), h(static_cast<std::size_t>(rows) * hl);
  std::vector<T> partial(static_cast<std::size_t>(rows) * kOut), out_local(static_cast<std::size_t>(local) * kOut);
  tp.reset_traffic();
  const T* x_whole = col.forward(h.data(), xl.data(), gathered.data(), w1l.data(), b1l.data());
  const T* y = row.forward(partial.data(), out_local.data(), h.data(), w2l.data(), b2.data());
  Pass p;
  p.y = widened(y, static_cast<std::size_t>(local) * kOut);
  std::vector<T> dh(static_cast<std::size_t>(rows) * hl), dy_whole(static_cast<std::size_t>(rows) * kOut);
  std::vector<T> dpartial(static_cast<std::size_t>(rows) * kIn), dx_local(static_cast<std::size_t>(local) * kIn);
  p.dw1.assign(w1l.size(), 0.0f);
  p.db1.assign(b1l.size(), 0.0f);
  p.dw2.assign(w2l.size(), 0.0f);
  p.db2.assign(b2.size(), 0.0f);
  row.backward(dh.data(), dy_whole.data(), p.dw2.data(), p.db2.data(), dyl.data(), h.data(), w2l.data());
  const T* dx =
      col.backward(dpartial.data(), dx_local.data(), p.dw1.data(), p.db1.data(), dh.data(), x_whole, w1l.data());
  p.dx = widened(dx, static_cast<std::size_t>(local) * kIn);
  dev.compute_stream().synchronize();
  p.bytes = tp.traffic().total();
  return p;
}

// The largest difference over the largest magnitude of `want`.
double relative(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::abs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::abs(want[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

TEST(ParallelLinear, Bf16ActivationsAreTheF32PairsWithinBf16RoundingAtHalfTheBytes) {
  const int world = runtime().world_size();
  DeviceMesh mesh(runtime(), MeshDims{1, 1, 1, world});
  std::unique_ptr<Kernels> kernels = make_kernels(runtime().device());
  const int hidden = 4 * world, T_len = 2 * world;
  const int rows = kB * T_len;
  const std::vector<float> x = bf16_uniform(static_cast<std::size_t>(rows) * kIn, 1);
  const std::vector<float> dy = bf16_uniform(static_cast<std::size_t>(rows) * kOut, 2);
  const std::vector<float> w1 = uniform(static_cast<std::size_t>(kIn) * hidden, 3), b1 = uniform(hidden, 4);
  const std::vector<float> w2 = uniform(static_cast<std::size_t>(hidden) * kOut, 5), b2 = uniform(kOut, 6);
  for (bool sp : {false, true}) {
    SCOPED_TRACE(fmt::format("tp {}{}", world, sp ? ", sequence parallel" : ""));
    const Pass f32 = run_pair<float>(mesh.tp(), *kernels, sp, T_len, hidden, x, dy, w1, b1, w2, b2);
    const Pass bf16 = run_pair<Bf16>(mesh.tp(), *kernels, sp, T_len, hidden, x, dy, w1, b1, w2, b2);
    // Each value of the bf16 pair is rounded a few times on its way (the input of each product, its output, each tp
    // rank's partial sum before the reduction, the reduction once more): at most about five roundings of 2^-8 of the
    // tensor's scale. Measured at most 7.8e-3 (the input gradient at tp 4).
    constexpr double kBar = 2e-2;
    EXPECT_LE(relative(bf16.y, f32.y), kBar) << "output";
    EXPECT_LE(relative(bf16.dx, f32.dx), kBar) << "input gradient";
    EXPECT_LE(relative(bf16.dw1, f32.dw1), kBar) << "column-parallel weight gradient";
    EXPECT_LE(relative(bf16.db1, f32.db1), kBar) << "column-parallel bias gradient";
    EXPECT_LE(relative(bf16.dw2, f32.dw2), kBar) << "row-parallel weight gradient";
    EXPECT_LE(relative(bf16.db2, f32.db2), kBar) << "row-parallel bias gradient";
    EXPECT_GT(relative(bf16.y, f32.y), 0) << "the bf16 pair rounded nothing";
    EXPECT_EQ(2 * bf16.bytes, f32.bytes);
    if (world > 1) {
      EXPECT_GT(bf16.bytes, 0u);
    }
    if (runtime().rank() == 0)
      std::printf(
          "tp %d%s: bf16 against f32, output %.2g, input gradient %.2g, weight gradients %.2g and %.2g; "
          "%llu bytes against %llu\n",
          world, sp ? " (sp)" : "", relative(bf16.y, f32.y), relative(bf16.dx, f32.dx), relative(bf16.dw1, f32.dw1),
          relative(bf16.dw2, f32.dw2), static_cast<unsigned long long>(bf16.bytes),
          static_cast<unsigned long long>(f32.bytes));
  }
}

// A pass over fewer rows than the group's micro-batch (a decode step's): the pair's output on those rows is the
// product worked in double over them, its all-reduce moves those rows alone, and under sequence parallelism (whose
// collectives cut the whole micro-batch) such a pass is refused naming the rows.
TEST(ParallelLinear, APassOverFewerRowsMultipliesAndReducesThoseRows) {
  const int world = runtime().world_size();
  DeviceMesh mesh(runtime(), MeshDims{1, 1, 1, world});
  std::unique_ptr<Kernels> k = make_kernels(runtime().device());
  const int hidden = 4 * world, max_rows = 7, n = 3;
  TensorParallel tp(runtime().device(), &mesh.tp(), false, 1, max_rows, std::max(hidden, kIn));
  ColumnParallelLinear col(tp, *k, kIn, hidden);
  RowParallelLinear row(tp, *k, hidden, kOut);
  const int hl = col.local_out(), r = tp.rank();
  const std::vector<float> x = uniform(static_cast<std::size_t>(n) * kIn, 11);
  const std::vector<float> w1 = uniform(static_cast<std::size_t>(kIn) * hidden, 12), b1 = uniform(hidden, 13);
  const std::vector<float> w2 = uniform(static_cast<std::size_t>(hidden) * kOut, 14), b2 = uniform(kOut, 15);
  std::vector<float> w1l(static_cast<std::size_t>(kIn) * hl), b1l(b1.begin() + r * hl, b1.begin() + (r + 1) * hl);
  for (int i = 0; i < kIn; ++i) std::copy_n(w1.begin() + i * hidden + r * hl, hl, w1l.begin() + i * hl);
  const std::vector<float> w2l(w2.begin() + r * hl * kOut, w2.begin() + (r + 1) * hl * kOut);
  // Buffers of the group's rows, NaN past the pass's: a product that read or reduced them would show it.
  std::vector<float> h(static_cast<std::size_t>(max_rows) * hl, NAN), y(static_cast<std::size_t>(max_rows) * kOut, NAN);
  tp.reset_traffic();
  col.forward(h.data(), x.data(), nullptr, w1l.data(), b1l.data(), n);
  const float* out = row.forward(y.data(), nullptr, h.data(), w2l.data(), b2.data(), n);
  ASSERT_EQ(out, y.data());
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < kOut; ++o) {
      double want = b2[static_cast<std::size_t>(o)];
      for (int j = 0; j < hidden; ++j) {
        double a = b1[static_cast<std::size_t>(j)];
        for (int c = 0; c < kIn; ++c)
          a += static_cast<double>(x[static_cast<std::size_t>(i * kIn + c)]) *
               w1[static_cast<std::size_t>(c * hidden + j)];
        want += a * w2[static_cast<std::size_t>(j * kOut + o)];
      }
      EXPECT_NEAR(out[i * kOut + o], want, 1e-5) << "row " << i << ", output " << o;
    }
  for (int i = n * kOut; i < max_rows * kOut; ++i) EXPECT_TRUE(std::isnan(y[static_cast<std::size_t>(i)])) << i;
  runtime().device().compute_stream().synchronize();
  EXPECT_EQ(tp.traffic().all_reduce_bytes, world > 1 ? static_cast<std::uint64_t>(n) * kOut * 4 : 0u);

  TensorParallel sp(runtime().device(), &mesh.tp(), true, 1, 2 * world, std::max(hidden, kIn));
  RowParallelLinear sp_row(sp, *k, hidden, kOut);
  try {
    sp_row.forward(y.data(), y.data(), h.data(), w2l.data(), b2.data(), 1);
    FAIL() << "a pass over 1 row under sequence parallelism";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a row-parallel product: a pass over 1 of the group's"), std::string::npos)
        << e.what();
  }
}

// Kernels with f32 products alone.
class F32Only : public LinearKernels {
 public:
  void matmul_forward(float*, const float*, const float*, const float*, int, int, int) override {}
  void matmul_backward(float*, float*, float*, const float*, const float*, const float*, int, int, int) override {}
  void add_bias(float*, const float*, int, int) override {}
  void zero(void*, std::size_t) override {}
};

TEST(ParallelLinear, KernelsWithoutBf16ActivationsRefuseThemByName) {
  TensorParallel tp(runtime().device(), nullptr, false, 1, 2, 4);
  F32Only k;
  ColumnParallelLinear col(tp, k, 4, 4);
  std::vector<Bf16> x(8), y(8);
  std::vector<float> w(16), b(4);
  try {
    col.forward(y.data(), x.data(), nullptr, w.data(), b.data());
    FAIL() << "bf16 activations on kernels without them";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("matmul_forward_bf16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
