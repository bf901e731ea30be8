// MemoryPlanner tests: the per-category arithmetic against hand-computed figures, the activation formulas, the
// tensor- and sequence-parallel terms, and the fit advice.
#include <gtest/gtest.h>

#include "core/error.h"
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
  in.recompute = RecomputePolicy::full();
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

// Llama 2 70B by its fields (models/llama's preset holds the same): grouped-query attention, SwiGLU, bias-free
// RMSNorm layers, rotary positions, an untied head. Exactly 68,976,648,192, at any sequence length.
ModelShape llama2_70b() {
  ModelShape m{0, 80, 8192, 64, 32000, 4096};
  m.kv_heads = 8;
  m.head_dim = 128;
  m.ffn = 28672;
  m.gated = m.rms_norm = m.rotary = true;
  m.tied = false;
  return m;
}

TEST(MemoryPlanner, ParameterCountOfALlamaFromItsShape) {
  ModelShape m = llama2_70b();
  EXPECT_DOUBLE_EQ(m.count(), 68976648192.0);
  const double h = 8192, per_layer = 2 * h + 2 * h * 8192 + 2 * h * 1024 + 3 * h * 28672;
  EXPECT_DOUBLE_EQ(m.layer_per_rank(1), per_layer);
  // tp 8: one kv head a rank, everything split but the norms; tp 16: k and v of one head on each rank.
  const double norms = 80 * 2 * h + h;
  EXPECT_DOUBLE_EQ(8 * m.count_per_rank(8) - 7 * norms, m.count());
  EXPECT_DOUBLE_EQ(16 * m.count_per_rank(16) - 15 * norms - 8 * 80 * 2 * h * 128, m.count());
  // Biases: q, k, v (Qwen2's), then o's too (Llama's attention_bias).
  m.qkv_bias = true;
  EXPECT_DOUBLE_EQ(m.count(), 68976648192.0 + 80 * (8192 + 2 * 1024));
  m.out_bias = true;
  EXPECT_DOUBLE_EQ(m.count(), 68976648192.0 + 80 * (8192 + 2 * 1024 + 8192));
  // GPT-2 with the Llama family's switches one by one: untied adds V h, rotary drops the table.
  ModelShape gpt{0, 12, 768, 12, 50257, 1024};
  gpt.tied = false;
  EXPECT_DOUBLE_EQ(gpt.count(), 124439808.0 + 50257.0 * 768);
  gpt.rotary = true;
  EXPECT_DOUBLE_EQ(gpt.count(), 124439808.0 + 50257.0 * 768 - 1024.0 * 768);
  EXPECT_EQ(grouped_count(68976648192.0), "68,976,648,192");
}

// The activation terms that tp splits take q's, the key / value heads' and the MLP's widths: 4 q + 4 kv + 6 ffn for a
// SwiGLU block (24 h for GPT-2's), kv counting a replicated head once on every rank.
TEST(MemoryPlanner, ActivationsUseTheKeyValueAndMlpWidths) {
  PlanInput in;
  in.model = llama2_70b();
  in.hardware.devices_per_node = 16;
  const double s = 4096, b = 1, h = 8192, q = 8192, kv = 1024, F = 28672;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(in), s * b * h * (10 + (4 * q + 4 * kv + 6 * F) / h));
  in.layout.tp = 16;  // one of the 8 kv heads on each rank: 16 x 128 channels over the group
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(in), s * b * h * (10 + (4 * q + 4 * 2048 + 6 * F) / h / 16));
  in.recompute = RecomputePolicy::uniform(BlockRecompute::kMlp);  // drops SiLU(gate) x up, 2 ffn / t
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(in),
                   s * b * h * (10 + (4 * q + 4 * 2048 + 6 * F) / h / 16 - 2 * F / h / 16));
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(in, BlockRecompute::kAttention), 4 * q * s / 16);
  EXPECT_NO_THROW(in.validate());
  in.layout.tp = 3;
  EXPECT_THROW(in.validate(), Error);  // neither divides the 8 kv heads nor is a multiple of them (nor divides 64)
}

// Megatron's split: the matrices, the column-parallel biases and the token embedding divide by tp (the vocabulary
// padded to a multiple of it); LayerNorms, row-parallel biases, the position table and the final LayerNorm are on
// every rank. GPT-2 small at tp 4, by hand, and summed back over the ranks to the whole model.
TEST(MemoryPlanner, TensorParallelSplitsMatricesAndReplicatesTheRest) {
  ModelShape m;
  m.layers = 12;
  m.hidden = 768;
  m.heads = 12;
  m.vocab = 50257;
  m.seq = 1024;
  const double h = 768;
  EXPECT_DOUBLE_EQ(m.layer_per_rank(4), (12 * h * h + 7 * h) / 4 + 6 * h);
  EXPECT_DOUBLE_EQ(m.count_per_rank(4), 31742976.0);  // 12 x 1775424 + (12565 + 1024) x 768 + 1536
  const double replicated = 12 * 6 * h + 1024 * h + 2 * h, padding = (4 * 12565 - 50257) * h;
  EXPECT_DOUBLE_EQ(4 * m.count_per_rank(4) - 3 * replicated - padding, m.count());
  EXPECT_DOUBLE_EQ(m.count_per_rank(1), m.count());
  m.params = 1e9;  // no dimensions to split by: an even split
  EXPECT_DOUBLE_EQ(m.count_per_rank(4), 2.5e8);
}

// Parameters, gradients and optimizer state per rank are those of its tp slice, then divided by the shard group as
// at tp 1; the LM head's logits are vocabulary-parallel.
TEST(MemoryPlanner, TensorParallelStateIsTheSliceOfTheRank) {
  PlanInput in = one_billion(ZeroStage::kNone, 2);
  in.model.params = 0;  // from the dimensions: 16 x (12h^2 + 13h) + (32000 + 1024) h + 2h
  in.layout.tp = 4;
  const double local = in.model.count_per_rank(4), layer = in.model.layer_per_rank(4);
  MemoryPlan s0 = plan_memory(in);
  EXPECT_DOUBLE_EQ(s0.params, 2 * local);
  EXPECT_DOUBLE_EQ(s0.grads, 2 * local);
  EXPECT_DOUBLE_EQ(s0.master, 4 * local);
  EXPECT_DOUBLE_EQ(s0.grad_shard, 4 * local);
  EXPECT_DOUBLE_EQ(s0.optim_state, 8 * local);
  in.layout.stage = ZeroStage::kParameters;
  MemoryPlan s3 = plan_memory(in);
  EXPECT_DOUBLE_EQ(s3.params, 2 * local / 2);
  EXPECT_DOUBLE_EQ(s3.optim_state, 8 * local / 2);
  EXPECT_DOUBLE_EQ(s3.grads, 2 * 2 * layer);
  EXPECT_DOUBLE_EQ(s3.unsharded, 2 * 2 * layer);
  const double head = 1024.0 * 32000 * (2 + 4) / 4;
  EXPECT_DOUBLE_EQ(s3.activations, 16 * activation_bytes_per_layer(in) + head);
}

// Korthikanti et al.: tp alone leaves the 10 s b h of the LayerNorm and dropout regions whole; sequence parallelism
// splits them (and, under recomputation, the kept layer input) too.
TEST(MemoryPlanner, SequenceParallelismDividesEveryActivationTerm) {
  PlanInput in = one_billion(ZeroStage::kParameters, 2);
  const double s = 1024, b = 1, h = 2048, a = 16, t = 4;
  in.layout.tp = 4;
  in.layout.sequence_parallel = true;
  in.tiled_attention = false;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(in), s * b * h * (34 + 5 * a * s / h) / t);
  in.tiled_attention = true;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(in), 34 * s * b * h / t);
  in.recompute = RecomputePolicy::full();
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(in), 2 * s * b * h / t);
  in.layout.sequence_parallel = false;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(in), 2 * s * b * h);
  in.layout.tp = 1;  // sequence parallelism over one rank changes nothing
  in.layout.sequence_parallel = true;
  in.recompute = RecomputePolicy{};
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(in), 34 * s * b * h);
}

// Context parallelism: every activation term and the logits are the rank's seq / cp tokens, the state shards over
// dp x cp, the ring keeps four [b, s / cp, 2h] blocks, and the longest sequence that fits grows with cp.
TEST(MemoryPlanner, ContextParallelismDividesTheSequence) {
  PlanInput one = one_billion(ZeroStage::kParameters, 2);
  PlanInput two = one;
  two.layout.cp = 2;
  const double s = 1024, b = 1, h = 2048;
  EXPECT_DOUBLE_EQ(activation_bytes_per_layer(two), 34 * (s / 2) * b * h);
  const MemoryPlan p1 = plan_memory(one), p2 = plan_memory(two);
  EXPECT_DOUBLE_EQ(p2.params, p1.params / 2);  // sharded over dp 2 x cp 2
  EXPECT_DOUBLE_EQ(p2.optim_state, p1.optim_state / 2);
  // The communicator's staging of a unit (f32 reductions of bf16 gradients, over 4 shards), then the ring's four bf16
  // blocks.
  const double layer = 12.0 * h * h + 13.0 * h, ring = 4 * (s / 2) * b * 2 * h * 2;
  EXPECT_DOUBLE_EQ(p2.comm_buffers, layer * 4 * (2 + 2.0 / 4 + 1) + ring);
  EXPECT_DOUBLE_EQ(p2.activations, p1.activations / 2);  // the layers' and the logits', all per token
  // The sequence must split into 2 cp chunks, and the devices count cp.
  two.model.seq = 1022;
  EXPECT_THROW(two.validate(), Error);
  // The longest sequence that fits on one 80 GB device grows with cp (a 1B model: state is small beside activations).
  PlanInput fit = one_billion(ZeroStage::kParameters, 1);
  fit.hardware.devices_per_node = 8;
  const LongestSeq at1 = longest_fitting_seq(fit);
  fit.layout.cp = 8;
  const LongestSeq at8 = longest_fitting_seq(fit);
  ASSERT_GT(at1.seq, 0);
  EXPECT_EQ(at1.seq % 128, 0);
  EXPECT_EQ(at8.seq % (2 * 8 * 64), 0);
  EXPECT_GT(at8.seq, 4 * at1.seq);
  fit.model.seq = at8.seq;
  EXPECT_TRUE(plan_memory(fit).fits);
  fit.model.seq = at8.seq + at8.step;
  EXPECT_FALSE(plan_memory(fit).fits);
}

TEST(MemoryPlanner, TensorParallelChangesAndChecks) {
  PlanInput in = one_billion(ZeroStage::kParameters, 2);
  in.layout.tp = 4;
  // A tp run without sequence parallelism: turning it on comes first, and costs neither compute nor traffic.
  std::vector<PlanChange> changes = fit_changes(in);
  ASSERT_FALSE(changes.empty());
  EXPECT_TRUE(changes[0].in.layout.sequence_parallel) << changes[0].what;
  EXPECT_NE(changes[0].what.find("--sequence-parallel"), std::string::npos) << changes[0].what;
  EXPECT_LT(plan_memory(changes[0].in).activations, plan_memory(in).activations);
  // With it on: kept by every change, and a larger tp only where the sequence still divides.
  in.layout.sequence_parallel = true;
  in.model.seq = 1000;  // divides by 4 and 8, not by 16
  in.layout.dp = 4;
  in.hardware.devices_per_node = 16;
  bool tp8 = false;
  for (const PlanChange& c : fit_changes(in)) {
    EXPECT_TRUE(c.in.layout.sequence_parallel) << c.what;
    EXPECT_EQ(in.model.seq % c.in.layout.tp, 0) << c.what;
    tp8 = tp8 || c.in.layout.tp == 8;
  }
  EXPECT_TRUE(tp8);
  in.model.seq = 1022;  // not divisible by 4
  EXPECT_THROW(plan_memory(in), Error);
  in.layout.sequence_parallel = false;
  EXPECT_NO_THROW(plan_memory(in));
  in.layout.tp = 3;  // does not divide 16 heads
  EXPECT_THROW(plan_memory(in), Error);
}

}  // namespace
}  // namespace strata
