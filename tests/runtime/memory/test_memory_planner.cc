// MemoryPlanner tests: the per-category arithmetic against hand-computed figures, the activation formulas, and
// the fit advice.
#include <gtest/gtest.h>

#include "runtime/memory/memory_planner.h"

namespace strata {
namespace {

PlanInput one_billion(ZeroStage stage, int dp) {
  PlanInput in;
  in.model.params = 1e9;
  in.model.layers = 16;
  in.model.hidden = 2048;
  in.model.heads = 16;
  in.model.vocab = 32000;
  in.model.seq = 1024;
  in.layout.dp = dp;
  in.layout.stage = stage;
  in.precision = {DType::kBF16, DType::kF32};
  return in;
}

TEST(MemoryPlanner, ZeroStagesDivideWhatTheyShard) {
  const double N = 1e9, layer = 12.0 * 2048 * 2048 + 13.0 * 2048;
  MemoryPlan s0 = plan_memory(one_billion(ZeroStage::kNone, 8));
  EXPECT_DOUBLE_EQ(s0.params, 2 * N);
  EXPECT_DOUBLE_EQ(s0.grads, 2 * N);
  EXPECT_DOUBLE_EQ(s0.master, 4 * N);
  EXPECT_DOUBLE_EQ(s0.optim_state, 8 * N);
  EXPECT_DOUBLE_EQ(s0.grad_shard, 4 * N);
  MemoryPlan s1 = plan_memory(one_billion(ZeroStage::kOptimizerState, 8));
  EXPECT_DOUBLE_EQ(s1.params, 2 * N);
  EXPECT_DOUBLE_EQ(s1.grads, 2 * N);
  EXPECT_DOUBLE_EQ(s1.master + s1.optim_state, 12 * N / 8);
  MemoryPlan s2 = plan_memory(one_billion(ZeroStage::kGradients, 8));
  EXPECT_DOUBLE_EQ(s2.grads, 2 * 2 * layer);  // two units' gradients in flight
  EXPECT_DOUBLE_EQ(s2.grad_shard, 4 * N / 8);
  MemoryPlan s3 = plan_memory(one_billion(ZeroStage::kParameters, 8));
  EXPECT_DOUBLE_EQ(s3.params, 2 * N / 8);
  EXPECT_DOUBLE_EQ(s3.unsharded, 2 * 2 * layer);  // prefetch depth 1: two gathered units
  EXPECT_LT(s3.total, s2.total);
  EXPECT_LT(s2.total, s1.total);
  EXPECT_LT(s1.total, s0.total);
}

TEST(MemoryPlanner, ActivationFormulas) {
  PlanInput in = one_billion(ZeroStage::kParameters, 8);
  const double s = 1024, b = 1, h = 2048, a = 16;
  in.tiled_attention = false;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(in), s * b * h * (34 + 5 * a * s / h));
  in.tiled_attention = true;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(in), 34 * s * b * h);
  in.layout.tp = 4;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(in), s * b * h * (10 + 24.0 / 4));
  in.recompute = true;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(in), 2 * s * b * h);
}

TEST(MemoryPlanner, AdviceFindsAChangeThatFits) {
  PlanInput in = one_billion(ZeroStage::kNone, 8);
  in.hardware.device_memory = 12e9;  // stage 0 needs 20 bytes/param = 20 GB plus activations
  MemoryPlan p = plan_memory(in);
  EXPECT_FALSE(p.fits);
  EXPECT_NE(p.advice.find("zero-stage 3"), std::string::npos) << p.advice;
  in.hardware.device_memory = 1e12;
  EXPECT_TRUE(plan_memory(in).fits);
}

TEST(MemoryPlanner, ParameterCountOfAGptFromItsShape) {
  ModelShape m;
  m.layers = 12;
  m.hidden = 768;
  m.vocab = 50257;
  m.seq = 1024;
  // GPT-2 small: 124,439,808 parameters (embeddings tied, biases and LayerNorms included).
  EXPECT_DOUBLE_EQ(m.count(), 124439808.0);
}

}  // namespace
}  // namespace strata
