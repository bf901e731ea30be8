// The sharding runtime on a GPU (label gpu; skips without one): FlatOps' kernels and the AdamW kernel against the
// host loops, and one ShardedModel + ShardedAdamW step on the CUDA device (NCCL world) against the same step computed
// on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "core/device_registry.h"
#include "runtime/optim/adamw_kernel.h"
#include "runtime/optim/sharded_adamw.h"
#include "runtime/sharding/flat_ops.h"
#include "runtime/sharding/sharded_model.h"
#include "tests/support/compare.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::runtime;

std::vector<float> values(std::size_t n, float scale, int seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(test::verifiable_int(seed, 0, i)) / 8.0f;
  return v;
}

// A device buffer holding `host`.
Buffer upload(Device& dev, const void* host, std::size_t bytes) {
  Buffer b = dev.allocate(bytes, MemCategory::kWorkspace);
  dev.copy_from_host(b.data(), host, bytes);
  return b;
}

template <typename T>
std::vector<T> download(Device& dev, const Buffer& b, std::size_t n) {
  dev.compute_stream().synchronize();
  std::vector<T> out(n);
  dev.copy_to_host(out.data(), b.data(), n * sizeof(T));
  return out;
}

TEST(CudaFlatOps, KernelsEqualTheHostLoops) {
  STRATA_SKIP_WITHOUT_CUDA_RUNTIME();
  Device& dev = runtime().device();
  Stream& s = dev.compute_stream();
  auto ops = create_flat_ops(dev);
  const std::size_t n = 100003;  // not a multiple of any block size
  std::vector<float> x = values(n, 1.3f, 1), y = values(n, 0.7f, 2);
  for (std::size_t i = 0; i < n; ++i) x[i] += 1e-3f * static_cast<float>(i % 97);  // bits below bf16's precision

  // Conversions round to nearest even exactly as the host does.
  for (DType t : {DType::kBF16, DType::kF16}) {
    std::vector<std::uint16_t> want(n);
    convert(x.data(), DType::kF32, want.data(), t, n);
    Buffer dx = upload(dev, x.data(), n * 4);
    Buffer dh = dev.allocate(n * 2, MemCategory::kWorkspace);
    ops->convert(dx.data(), DType::kF32, dh.data(), t, n, s);
    EXPECT_EQ(download<std::uint16_t>(dev, dh, n), want) << dtype_name(t);
    // ... and back, and accumulate / add_f32_into from that type.
    std::vector<float> back(n), acc = y, added(n);
    convert(want.data(), t, back.data(), DType::kF32, n);
    accumulate_f32(acc.data(), want.data(), t, n);
    std::vector<std::uint16_t> into = want;
    add_f32_into(into.data(), t, y.data(), n);
    Buffer dback = dev.allocate(n * 4, MemCategory::kWorkspace);
    ops->convert(dh.data(), t, dback.data(), DType::kF32, n, s);
    EXPECT_EQ(download<float>(dev, dback, n), back);
    Buffer dacc = upload(dev, y.data(), n * 4);
    ops->accumulate_f32(dacc.as<float>(), dh.data(), t, n, s);
    EXPECT_EQ(download<float>(dev, dacc, n), acc);
    Buffer dy = upload(dev, y.data(), n * 4);
    ops->add_f32_into(dh.data(), t, dy.as<float>(), n, s);
    EXPECT_EQ(download<std::uint16_t>(dev, dh, n), into);
  }
  // Scaling is one f32 multiply; the sum of squares is in double (its order differs from the host's).
  {
    std::vector<float> want = x;
    scale_f32(want.data(), n, 0.375f);
    Buffer dx = upload(dev, x.data(), n * 4);
    ops->scale_f32(dx.as<float>(), n, 0.375f, s);
    EXPECT_EQ(download<float>(dev, dx, n), want);
    const double start = 2.5;
    Buffer acc = upload(dev, &start, 8);
    ops->add_sum_squares(dx.as<float>(), n, acc.as<double>(), s);
    const double got = download<double>(dev, acc, 1)[0], expect = start + sum_squares(want.data(), n);
    EXPECT_NEAR(got, expect, 1e-12 * expect);
  }
  // AdamW (the optimizer's kernel, beside these): the same f32 constants; the GPU may contract into FMA, so allow a
  // few ulps.
  {
    auto adamw = create_adamw_kernel(dev);
    AdamWConfig cfg;
    std::vector<float> p = x, g = y, m(n, 0.01f), v(n, 0.002f);
    Buffer dp = upload(dev, p.data(), n * 4), dg = upload(dev, g.data(), n * 4), dm = upload(dev, m.data(), n * 4),
           dv = upload(dev, v.data(), n * 4);
    for (int t = 1; t <= 3; ++t) {
      adamw_update(p.data(), g.data(), m.data(), v.data(), n, cfg, 1e-3, t, true);
      adamw->update(dp.as<float>(), dg.as<float>(), dm.as<float>(), dv.as<float>(), n, cfg, 1e-3, t, true, nullptr,
                    s);
    }
    auto gp = download<float>(dev, dp, n);
    EXPECT_LE(test::max_rel(gp, p, 1e-6), 1e-5);
  }
}

// One unit of two slots; the trainer's gradient is a known function of the gathered parameters. One step on the
// GPU through gathers, reduction, norm, clipping and AdamW, against the same arithmetic on the host.
TEST(CudaShardedModel, OneStepEqualsTheHostArithmetic) {
  STRATA_SKIP_WITHOUT_CUDA_RUNTIME();
  Runtime& rt = runtime();
  Device& dev = rt.device();
  const std::size_t n0 = 1000, n1 = 37;
  std::vector<UnitSpec> units{
      {"u", {{"w", {static_cast<std::int64_t>(n0)}, true, true}, {"b", {static_cast<std::int64_t>(n1)}, false, false}}}};
  AdamWConfig adam;
  adam.lr = 1e-2;
  for (int stage : {0, 3}) {
    for (DType pdt : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(fmt::format("stage {} {}", stage, dtype_name(pdt)));
      ShardingOptions o;
      o.stage = zero_stage_from_int(stage);
      o.mixed_precision.param_dtype = pdt;
      ShardedModel model(rt, units, o);
      OptimizerOptions clip;
      clip.grad_clip = 0.5;
      ShardedAdamW optimizer(model, adam, clip);
      const std::vector<float> w0 = values(n0, 0.5f, 3), b0 = values(n1, 0.25f, 4);
      model.init([&](const ParamSlot& s, std::size_t begin, std::size_t count, float* out) {
        const std::vector<float>& src = s.name == "w" ? w0 : b0;
        std::memcpy(out, src.data() + begin, count * 4);
      });
      const std::vector<TensorView>& fwd = model.begin_forward(0);
      ASSERT_EQ(fwd.size(), 2u);
      model.end_forward(0);
      BackwardViews bv = model.begin_backward(0);
      // The views were zeroed on the compute stream; copy_from_host is ordered with no stream, so wait first.
      dev.compute_stream().synchronize();
      // gradient = the gathered parameter (in param dtype) times 3: written from the host through a copy.
      std::vector<float> gw(n0), gb(n1);
      for (std::size_t i = 0; i < n0; ++i) gw[i] = 3 * w0[i];
      for (std::size_t i = 0; i < n1; ++i) gb[i] = 3 * b0[i];
      std::vector<std::uint16_t> half(std::max(n0, n1));
      for (std::size_t k = 0; k < 2; ++k) {
        const std::vector<float>& g = k == 0 ? gw : gb;
        if (pdt == DType::kF32) {
          dev.copy_from_host(bv.grads[k].data, g.data(), g.size() * 4);
        } else {
          convert(g.data(), DType::kF32, half.data(), pdt, g.size());
          dev.copy_from_host(bv.grads[k].data, half.data(), g.size() * 2);
        }
      }
      model.end_backward(0);
      StepResult r = optimizer.step(adam.lr);
      // The host's arithmetic: the gradient in param dtype, averaged over ranks (all equal), clipped, AdamW.
      std::vector<float> g = gw, p = w0, m(n0, 0.0f), v(n0, 0.0f);
      if (pdt != DType::kF32) {
        convert(g.data(), DType::kF32, half.data(), pdt, n0);
        convert(half.data(), pdt, g.data(), DType::kF32, n0);
      }
      double sq = 0;
      for (float x : g) sq += double{x} * x;  // "b" is not trainable
      const double norm = std::sqrt(sq);
      EXPECT_NEAR(r.grad_norm, norm, 1e-6 * norm);
      const float coef = static_cast<float>(std::min(1.0, 0.5 / (norm + 1e-6)));
      for (float& x : g) x *= coef;
      adamw_update(p.data(), g.data(), m.data(), v.data(), n0, adam, adam.lr, 1, true);
      std::vector<float> got = model.parameters().gather_master(0);
      EXPECT_LE(test::max_abs(std::span<const float>(got.data(), n0), std::span<const float>(p.data(), n0)), 1e-6)
          << "w after one step";
      for (std::size_t i = 0; i < n1; ++i) EXPECT_EQ(got[n0 + i], b0[i]) << "b is not trainable";
    }
  }
}

}  // namespace
}  // namespace strata
