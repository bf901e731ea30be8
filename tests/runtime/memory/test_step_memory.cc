// predict_step_memory over a declaration (runtime/memory/step_memory.h) against the ledger of a real step: a model
// of three units at every ZeRO stage, plain and hybrid, whose trainer keeps its first unit gathered through the other
// units' forwards and declares its own activations and workspace. np 1, 2 and 4.
#include <gtest/gtest.h>

#include <array>

#include "runtime/memory/step_memory.h"
#include "runtime/optim/sharded_adamw.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/sharding/sharded_model.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::runtime;

const std::vector<UnitSpec> kUnits = {{"a", {{"a.w", {37, 5}}, {"a.b", {5}, /*weight_decay=*/false}}},
                                      {"b", {{"b.w", {64}}}},
                                      {"c", {{"c.w", {3, 3}}, {"c.frozen", {7}, false, /*trainable=*/false}}}};

// kUnits at ZeRO `stage`, nothing else declared.
StepDeclaration declaration_at(int stage) {
  StepDeclaration d;
  d.units = kUnits;
  d.sharding.stage = zero_stage_from_int(stage);
  return d;
}

// One step of the trainer described above; returns the peak bytes per category it added to the device's ledger.
CategoryBytes measure_step(DeviceMesh& mesh, const ShardingOptions& o, std::uint64_t activations,
                           std::uint64_t workspace) {
  Device& dev = runtime().device();
  CategoryBytes before{}, peak{};
  for (std::size_t i = 0; i < kNumMemCategories; ++i)
    before[i] = dev.memory_stats().current(static_cast<MemCategory>(i));
  dev.memory_stats().reset_peaks();
  {
    ShardedModel model(mesh, kUnits, o);
    model.init([](const ParamSlot&, std::size_t, std::size_t n, float* out) { std::fill(out, out + n, 0.5f); });
    ShardedAdamW optimizer(model, AdamWConfig{});
    Buffer acts = dev.allocate(activations, MemCategory::kActivations);
    Buffer scratch = dev.allocate(workspace, MemCategory::kWorkspace);
    model.begin_forward(0);  // held through the others' forwards, as a tied embedding for the head
    for (int u = 1; u < 3; ++u) {
      model.begin_forward(u);
      model.end_forward(u);
    }
    model.end_forward(0);
    for (int u = 2; u >= 0; --u) {
      BackwardViews v = model.begin_backward(u);
      for (const TensorView& g : v.grads) dev.fill_zero(g.data, g.numel() * dtype_size(g.dtype), dev.compute_stream());
      model.end_backward(u);
    }
    optimizer.step(0.1);
    dev.compute_stream().synchronize();
    for (std::size_t i = 0; i < kNumMemCategories; ++i)
      peak[i] = dev.memory_stats().peak(static_cast<MemCategory>(i)) - before[i];
  }
  return peak;
}

TEST(StepMemory, TheDeclarationPredictsEveryCategoryOfTheStep) {
  const int world = runtime().world_size();
  for (int replicate : {1, 2}) {
    if (world % replicate != 0) continue;
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(fmt::format("ZeRO {} over {} ranks, {} replicas", stage, world, replicate));
      DeviceMesh mesh(runtime(), MeshDims{1, replicate, -1, 1});
      StepDeclaration d = declaration_at(stage);
      const ShardingOptions& o = d.sharding;
      d.groups = DataParallelSizes{world / replicate, replicate};
      d.kept_open = PoolPeaks{1, 0};  // unit 0 gathered beside the others (a pool slot more, where params pool)
      d.add("the trainer's activations", MemCategory::kActivations, 4096);
      d.add("the trainer's scratch", MemCategory::kWorkspace, 512);
      const CategoryBytes predicted = predict_step_memory(d);
      const CategoryBytes measured = measure_step(mesh, o, 4096, 512);
      for (std::size_t i = 0; i < kNumMemCategories; ++i) {
        const MemCategory c = static_cast<MemCategory>(i);
        // The MPI backend's staging grows per (group, stream) and lives as long as the group: a group that spans the
        // world is the runtime's own, grown by an earlier case, so the step adds at most the prediction there.
        if (c == MemCategory::kCommBuffer) {
          EXPECT_LE(measured[i], predicted[i]) << declaration_table(d);
          if (replicate > 1 || world == 1) {
            EXPECT_EQ(measured[i], predicted[i]) << declaration_table(d);
          }
          continue;
        }
        EXPECT_EQ(measured[i], predicted[i]) << mem_category_name(c) << "\n" << declaration_table(d);
      }
    }
  }
}

TEST(StepMemory, HeldPoolSlotsGrowThePoolsByTheSlotsBeyondTheFirst) {
  StepDeclaration d = declaration_at(3);
  const CategoryBytes plain = predict_step_memory(d);
  d.held = PoolPeaks{5, 4};
  const CategoryBytes held = predict_step_memory(d);
  for (const PoolPlan& p : predict_state_memory(kUnits, d.sharding, d.groups, d.optimizer_floats).pools) {
    const std::size_t i = static_cast<std::size_t>(p.category);
    const std::uint64_t want = p.buffer == UnitBuffer::kUnshardedParams  ? 5
                               : p.buffer == UnitBuffer::kUnshardedGrads ? 4
                                                                         : 0;
    if (want == 0) continue;
    EXPECT_EQ(held[i] - plain[i], (want - static_cast<std::uint64_t>(p.initial_slots)) * p.slot_bytes)
        << mem_category_name(p.category);
  }
  EXPECT_NE(declaration_table(d).find("pool slots the step holds beyond the first"), std::string::npos);
}

// A buffer declared in host memory (activation offload's host sets) counts on the host side alone; the device keeps
// what it had, and the table names it as the host's.
TEST(StepMemory, HostBuffersCountOnTheHostAlone) {
  StepDeclaration d = declaration_at(2);
  d.add("the trainer's activations", MemCategory::kActivations, 4096);
  const CategoryBytes device = predict_step_memory(d), host = predict_step_host_memory(d);
  d.add_host("offloaded activations", MemCategory::kActivations, 12288);
  const std::size_t acts = static_cast<std::size_t>(MemCategory::kActivations);
  EXPECT_EQ(predict_step_memory(d), device);
  CategoryBytes want = host;
  want[acts] += 12288;
  EXPECT_EQ(predict_step_host_memory(d), want);
  EXPECT_NE(declaration_table(d).find("host: offloaded activations"), std::string::npos) << declaration_table(d);
}

}  // namespace
}  // namespace strata
