// CPU offload tests (CPU backend, np 1-4): offloaded training equals training without offload bit for bit; the
// device and host ledgers hold exactly what the policy puts there; the copies per step equal their prediction; a
// device budget that only offload fits; and bad combinations.
#include <gtest/gtest.h>

#include <algorithm>

#include "models/mlp/mlp.h"
#include "core/error.h"
#include "runtime/optim/sharded_adamw.h"
#include "runtime/sharding/sharded_model.h"
#include "tests/support/mlp_training.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::History;
using test::kGlobalRows;
using test::kSeed;
using test::runtime;
using test::sharded_training;
using test::small_config;
using test::test_adamw;
using test::train_step;
using test::TrainSetup;

struct OffloadCase {
  ZeroStage stage;
  DType param_dtype;
  OffloadPolicy offload;
};

std::vector<OffloadCase> offload_cases() {
  std::vector<OffloadCase> cases;
  for (int stage = 0; stage <= 3; ++stage)
    for (DType pdt : {DType::kF32, DType::kBF16})
      for (OffloadPolicy off : {OffloadPolicy::kOptimizer, OffloadPolicy::kOptimizerAndParams}) {
        if (off == OffloadPolicy::kOptimizerAndParams && stage != 3) continue;
        cases.push_back({zero_stage_from_int(stage), pdt, off});
      }
  return cases;
}

std::string describe(const OffloadCase& c) {
  return fmt::format("stage {} param dtype {} offload {}", static_cast<int>(c.stage), dtype_name(c.param_dtype),
                     offload_name(c.offload));
}

// Offload moves where the state lives and where AdamW runs, never what is computed: losses, norms and every
// parameter are bitwise those of the same run without offload.
TEST(Offload, EqualsNoOffloadBitwiseForEveryStageAndDtype) {
  for (const OffloadCase& c : offload_cases()) {
    SCOPED_TRACE(describe(c));
    for (bool no_sync : {false, true}) {
      TrainSetup setup;
      setup.sharding.stage = c.stage;
      setup.sharding.mixed_precision = {c.param_dtype, DType::kF32};
      setup.no_sync = no_sync;
      setup.grad_clip = 0.05;
      setup.micro_batches = 2;
      History want = sharded_training(small_config(), setup, 3);
      setup.sharding.offload = c.offload;
      History got = sharded_training(small_config(), setup, 3);
      EXPECT_EQ(got.losses, want.losses);
      EXPECT_EQ(got.norms, want.norms);
      EXPECT_EQ(got.params, want.params);
    }
  }
}

// The device ledger keeps what computes; the host ledger keeps what offload moved there, to the byte.
TEST(Offload, DeviceAndHostLedgersHoldExactlyWhatThePolicyPlacesThere) {
  Runtime& rt = runtime();
  Device& dev = rt.device();
  const std::size_t W = static_cast<std::size_t>(rt.world_size());
  for (const OffloadCase& c : offload_cases()) {
    SCOPED_TRACE(describe(c));
    auto units = mlp::mlp_units(small_config());
    const int stage = static_cast<int>(c.stage);
    const std::size_t shard_world = stage == 0 ? 1 : W, quantum = shard_world * 16, psz = dtype_size(c.param_dtype);
    std::size_t sumP = 0, maxP = 0;
    for (const UnitSpec& u : units) {
      std::size_t n = 0;
      for (const SlotSpec& s : u.slots) n += shape_numel(s.shape);
      const std::size_t padded = (n + quantum - 1) / quantum * quantum;
      sumP += padded;
      maxP = std::max(maxP, padded);
    }
    const std::size_t sumS = sumP / shard_world, maxS = maxP / shard_world;
    auto slot = [](std::size_t b) { return std::max<std::size_t>(b, 64); };  // BufferPool's smallest slot
    const std::size_t device_before = dev.memory_stats().current_total();

    ShardingOptions o;
    o.stage = c.stage;
    o.mixed_precision.param_dtype = c.param_dtype;
    o.offload = c.offload;
    ShardedModel model(rt, units, o);
    ShardedAdamW optimizer(model, test_adamw());
    model.init(
        [](const ParamSlot& s, std::size_t b, std::size_t n, float* out) { mlp::mlp_init(s, b, n, out, kSeed); });
    ASSERT_NE(model.resources().host_device(), nullptr);
    Device& host = *model.resources().host_device();
    EXPECT_EQ(host.name(), "host");
    const bool params_on_host = c.offload == OffloadPolicy::kOptimizerAndParams;
    for (int step = 0; step < 2; ++step) train_step(model, optimizer, step, 2);

    auto on_dev = [&](MemCategory k) { return dev.memory_stats().current(k); };
    auto on_host = [&](MemCategory k) { return host.memory_stats().current(k); };
    // Optimizer state: all of it on the host, none on the device. The master is its own buffer unless the f32
    // parameter shards are on the host too (then they are the master).
    EXPECT_EQ(on_dev(MemCategory::kMaster), 0u);
    EXPECT_EQ(on_dev(MemCategory::kGradShard), 0u);
    EXPECT_EQ(on_dev(MemCategory::kOptimState), 0u);
    const bool aliased = params_on_host && c.param_dtype == DType::kF32;
    EXPECT_EQ(on_host(MemCategory::kMaster), aliased ? 0 : sumS * 4);
    EXPECT_EQ(on_host(MemCategory::kGradShard), sumS * 4);
    EXPECT_EQ(on_host(MemCategory::kOptimState), sumS * 8);
    // Parameter shards: on the host under parameter offload, with one staged copy per gather in flight (depth 1:
    // two) on the device; else on the device.
    EXPECT_EQ(on_host(MemCategory::kParamShard), params_on_host ? sumS * psz : 0);
    EXPECT_EQ(on_dev(MemCategory::kParamShard), params_on_host ? 2 * slot(maxS * psz) : (stage == 3 ? sumS * psz : 0));
    // Host staging: two landing slots for returned gradient shards (f32), two upload slots for bf16 parameters.
    const bool upload_slots = !params_on_host && c.param_dtype != DType::kF32;
    EXPECT_EQ(on_host(MemCategory::kCommBuffer), 2 * slot(maxS * 4) + (upload_slots ? 2 * slot(maxS * psz) : 0));
    EXPECT_EQ(host.memory_stats().current_total(), host.memory_stats().peak_total()) << "host memory crept";
    EXPECT_GT(dev.memory_stats().current_total(), device_before);
  }
}

// What offload copies per step: every micro-batch's reduced gradient shard down (f32), and up either the updated
// parameter slice once per step (optimizer offload) or each unit's shard before each of its gathers (parameters).
TEST(Offload, CopiesPerStepEqualThePrediction) {
  Runtime& rt = runtime();
  for (const OffloadCase& c : offload_cases()) {
    SCOPED_TRACE(describe(c));
    ShardingOptions o;
    o.stage = c.stage;
    o.mixed_precision.param_dtype = c.param_dtype;
    o.offload = c.offload;
    ShardedModel model(rt, mlp::mlp_units(small_config()), o);
    ShardedAdamW optimizer(model, test_adamw());
    model.init(
        [](const ParamSlot& s, std::size_t b, std::size_t n, float* out) { mlp::mlp_init(s, b, n, out, kSeed); });
    train_step(model, optimizer, 0, 2);
    const StepSummary& s = model.resources().last_step_summary();
    SCOPED_TRACE(s.describe());
    std::uint64_t sumS = 0;
    for (int u = 0; u < model.num_units(); ++u) sumS += model.layout(u).shard_numel();
    const std::uint64_t psz = dtype_size(c.param_dtype);
    EXPECT_EQ(s.to_host_bytes, 2 * sumS * 4) << "one f32 gradient shard per micro-batch";
    if (c.offload == OffloadPolicy::kOptimizerAndParams)
      EXPECT_EQ(s.to_device_bytes, 2 * 2 * sumS * psz) << "each shard before each of 2 gathers x 2 micro-batches";
    else
      EXPECT_EQ(s.to_device_bytes, sumS * psz) << "the updated slice, once";
  }
}

// After the first step neither the device nor the host allocates inside a step.
TEST(Offload, NoAllocationInsideAStepAfterTheFirst) {
  Runtime& rt = runtime();
  for (OffloadPolicy off : {OffloadPolicy::kOptimizer, OffloadPolicy::kOptimizerAndParams}) {
    ShardingOptions o;
    o.mixed_precision = {DType::kBF16, DType::kF32};
    o.offload = off;
    ShardedModel model(rt, mlp::mlp_units(small_config()), o);
    ShardedAdamW optimizer(model, test_adamw());
    model.init(
        [](const ParamSlot& s, std::size_t b, std::size_t n, float* out) { mlp::mlp_init(s, b, n, out, kSeed); });
    // The MLP's activations are the trainer's ledger memory, allocated per micro-batch: not Strata's.
    const MemoryStats& dev = rt.device().memory_stats();
    auto strata_allocations = [&] { return dev.allocations() - dev.allocations(MemCategory::kActivations); };
    train_step(model, optimizer, 0, 2);
    const std::size_t dev_after = strata_allocations();
    const std::size_t host_after = model.resources().host_device()->memory_stats().allocations();
    for (int step = 1; step < 4; ++step) train_step(model, optimizer, step, 2);
    EXPECT_EQ(strata_allocations(), dev_after) << offload_name(off);
    EXPECT_EQ(model.resources().host_device()->memory_stats().allocations(), host_after) << offload_name(off);
  }
}

// A device budget the model does not fit at ZeRO-0: the allocator refuses with the ledger and the planner's advice
// in the message; the advised change fits and trains in the same budget, and so does optimizer offload alone.
TEST(Offload, OverBudgetErrorAdvisesAChangeThatFits) {
  Runtime& rt = runtime();
  Device& dev = rt.device();
  const std::size_t saved = dev.memory_budget();
  ShardingOptions o;
  o.stage = ZeroStage::kNone;  // every rank holds the whole optimizer: 16 bytes per parameter on the device
  std::size_t params = 0;
  for (const UnitSpec& u : mlp::mlp_units(small_config()))
    for (const SlotSpec& s : u.slots) params += shape_numel(s.shape);
  // Room for the parameters, gradients and staging, not for the 12 bytes per parameter of master and Adam state.
  dev.set_memory_budget(dev.memory_stats().current_total() + 10 * params + 4096);
  std::string message;
  try {
    ShardedModel model(rt, mlp::mlp_units(small_config()), o);
    ShardedAdamW optimizer(model, test_adamw());
    ADD_FAILURE() << "the model fit in a budget too small for it";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    message = e.what();
  }
  EXPECT_NE(message.find("device memory budget"), std::string::npos) << message;
  EXPECT_NE(message.find("optim_state"), std::string::npos) << "the ledger: " << message;
  EXPECT_NE(message.find("memory planner (Strata's own state): needs "), std::string::npos) << message;
  const std::size_t at = message.find("the cheapest change that fits: ");
  ASSERT_NE(at, std::string::npos) << message;
  // Follow the advice (ZeRO-3 where there are ranks to shard over, else offload), then offload alone.
  ShardingOptions advised = o;
  const std::string advice = message.substr(at);
  if (advice.find("ZeRO stage 3") != std::string::npos) advised.stage = ZeroStage::kParameters;
  if (advice.find("parameter offload") != std::string::npos)
    advised.offload = OffloadPolicy::kOptimizerAndParams;
  else if (advice.find("offload") != std::string::npos)
    advised.offload = OffloadPolicy::kOptimizer;
  ShardingOptions offload_only = o;
  offload_only.offload = OffloadPolicy::kOptimizer;
  // The advice is about the state; the steps below also hold the MLP's activations (the trainer's ledger memory: at
  // most every layer's input and output for all of the global rows).
  const mlp::MlpConfig cfg = small_config();
  std::size_t widths = 0;
  for (int i = 0; i < cfg.num_layers(); ++i) widths += static_cast<std::size_t>(cfg.layer_in(i) + cfg.layer_out(i));
  dev.set_memory_budget(dev.memory_budget() + 4 * static_cast<std::size_t>(kGlobalRows) * widths);
  for (const ShardingOptions& fits : {advised, offload_only}) {
    SCOPED_TRACE(fits.describe());
    ShardedModel model(rt, mlp::mlp_units(small_config()), fits);
    ShardedAdamW optimizer(model, test_adamw());
    model.init(
        [](const ParamSlot& s, std::size_t b, std::size_t n, float* out) { mlp::mlp_init(s, b, n, out, kSeed); });
    for (int step = 0; step < 2; ++step) train_step(model, optimizer, step, 1);
    EXPECT_LE(dev.memory_stats().peak_total(), dev.memory_budget());
  }
  dev.set_memory_budget(saved);
}

TEST(Offload, ParameterOffloadBelowStageThreeIsAClearError) {
  ShardingOptions o;
  o.stage = ZeroStage::kGradients;
  o.offload = OffloadPolicy::kOptimizerAndParams;
  EXPECT_EQ(test::error_code_of([&] { ShardedModel m(runtime(), mlp::mlp_units(small_config()), o); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(test::error_code_of([] { offload_from_name("gpu"); }), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
