// Checkpoints on a GPU (label gpu; skips without one): a ShardedModel and ShardedAdamW on the CUDA device save through
// pinned host staging (synchronously and asynchronously) and load back bitwise, also into offloaded and bf16 layouts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "core/device_registry.h"
#include "runtime/checkpoint/checkpointer.h"
#include "runtime/optim/sharded_adamw.h"
#include "runtime/sharding/flat_ops.h"
#include "runtime/sharding/sharded_model.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::runtime;

const std::size_t kN0 = 5000, kN1 = 37;

std::vector<UnitSpec> units() {
  return {{"u", {{"w", {static_cast<std::int64_t>(kN0)}, true, true}, {"b", {static_cast<std::int64_t>(kN1)}, false, true}}},
          {"v", {{"x", {3, 7}, true, true}}}};
}

float value(const ParamSlot& s, std::size_t i) {
  return static_cast<float>(test::verifiable_int(static_cast<int>(s.numel), 0, i)) / 16.0f;
}

// One step whose gradients are a known function of the parameters, written into the views from the host.
void one_step(ShardedModel& model, ShardedAdamW& optimizer) {
  Device& dev = model.resources().device();
  for (int u = 0; u < model.num_units(); ++u) {
    model.begin_forward(u);
    model.end_forward(u);
  }
  for (int u = model.num_units() - 1; u >= 0; --u) {
    BackwardViews v = model.begin_backward(u);
    dev.compute_stream().synchronize();
    for (const TensorView& g : v.grads) {
      std::vector<float> host(g.numel());
      for (std::size_t i = 0; i < host.size(); ++i) host[i] = 0.25f * value(*g.slot, i) + 0.01f;
      std::vector<std::uint16_t> half(host.size());
      if (g.dtype == DType::kF32) {
        dev.copy_from_host(g.data, host.data(), host.size() * 4);
      } else {
        convert(host.data(), DType::kF32, half.data(), g.dtype, host.size());
        dev.copy_from_host(g.data, half.data(), half.size() * 2);
      }
    }
    model.end_backward(u);
  }
  optimizer.step(1e-2);
}

std::vector<float> moments(ShardedModel& model, ShardedAdamW& opt, int u) {
  ShardedParameters& p = model.parameters();
  const std::size_t n = p.unit(u).numel();
  std::vector<float> out(2 * n);
  p.stream().synchronize();
  for (int k = 0; k < 2; ++k) {
    const float* src = k == 0 ? opt.exp_avg(u) : opt.exp_avg_sq(u);
    if (p.device().kind() == DeviceKind::kCpu) std::memcpy(out.data() + k * n, src, n * 4);
    else p.device().copy_to_host(out.data() + k * n, src, n * 4);
  }
  return out;
}

TEST(CudaCheckpoint, SaveAndLoadAreBitwiseThroughHostStaging) {
  STRATA_SKIP_WITHOUT_CUDA_RUNTIME();
  Runtime& rt = runtime();
  // One rank (NCCL needs a GPU per rank; the job is np 1), so its pid names a directory of its own.
  const std::string dir =
      (std::filesystem::temp_directory_path() / fmt::format("strata_cuda_ckpt_{}", ::getpid())).string();
  AdamWConfig adam;
  adam.lr = 1e-2;
  for (bool async : {false, true}) {
    for (int stage : {0, 3}) {
      SCOPED_TRACE(fmt::format("stage {} async {}", stage, async));
      std::filesystem::remove_all(dir);
      ShardingOptions o;
      o.stage = zero_stage_from_int(stage);
      ShardedModel a(rt, units(), o);
      ShardedAdamW opt_a(a, adam);
      a.init([](const ParamSlot& s, std::size_t b, std::size_t n, float* out) {
        for (std::size_t i = 0; i < n; ++i) out[i] = value(s, b + i);
      });
      for (int s = 0; s < 2; ++s) one_step(a, opt_a);
      CheckpointOptions c;
      c.dir = dir;
      c.async = async;
      {
        Checkpointer ck(a, opt_a, rt.world(), c);
        ck.save(2, {{"next_step", 2}});
        ck.wait();
        EXPECT_TRUE(ck.last_save().committed);
      }
      // Back into the same layout, into an offloaded one and into bf16 parameters: the master is the same bits.
      for (int variant = 0; variant < 3; ++variant) {
        ShardingOptions lo = o;
        if (variant == 1) lo.offload = OffloadPolicy::kOptimizer;
        if (variant == 2) lo.mixed_precision.param_dtype = DType::kBF16;
        ShardedModel b(rt, units(), lo);
        ShardedAdamW opt_b(b, adam);
        Checkpointer ck(b, opt_b, rt.world(), c);
        EXPECT_EQ(ck.load().value("next_step", -1), 2);
        EXPECT_EQ(opt_b.steps_taken(), 2);
        for (int u = 0; u < a.num_units(); ++u) {
          EXPECT_EQ(b.parameters().gather_master(u), a.parameters().gather_master(u))
              << "variant " << variant << " unit " << u;
          if (variant == 0) {
            EXPECT_EQ(moments(b, opt_b, u), moments(a, opt_a, u)) << "unit " << u;
          }
        }
      }
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
