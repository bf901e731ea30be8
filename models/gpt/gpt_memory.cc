// predict_step_memory: the arithmetic behind each ledger category for the GPT trainer.
#include "models/gpt/gpt_memory.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/memory/memory_planner.h"
#include "runtime/sharding/shard_layout.h"
#include "runtime/sharding/sharded_unit.h"
#include "runtime/sharding/state_memory.h"

namespace strata::gpt {
namespace {

// The trainer's mesh: every rank data-parallel, dp_replicate groups of world / dp_replicate shards.
DataParallelSizes groups(const TrainConfig& cfg, int world) {
  return DataParallelSizes{world / cfg.dp_replicate, cfg.dp_replicate};
}

}  // namespace

CategoryBytes predict_step_memory(const TrainConfig& cfg, int world) {
  const ShardingOptions& o = cfg.sharding;
  const StagePlan plan = StagePlan::from(o);
  const auto units = gpt_units(cfg.model);
  // Strata's own buffers and AdamW's two moments.
  CategoryBytes b = predict_state_memory(units, o, groups(cfg, world), 2).device;
  auto at = [&](MemCategory c) -> std::uint64_t& { return b[static_cast<std::size_t>(c)]; };
  const int shard = o.stage == ZeroStage::kNone ? 1 : groups(cfg, world).shard;
  std::uint64_t max_p = 0, emb_p = 0, max_other_p = 0;
  for (std::size_t u = 0; u < units.size(); ++u) {
    const std::uint64_t p = ShardLayout(units[u].slots, shard, o.align_elements).padded_numel();
    max_p = std::max(max_p, p);
    if (u == 0)
      emb_p = p;
    else
      max_other_p = std::max(max_other_p, p);
  }
  // The trainer keeps the embeddings unit (the tied LM head) gathered from the first forward to the head, and its
  // gradients open through the whole backward: each pool grows by one slot in the first step.
  const std::uint64_t extra_slot = std::max<std::uint64_t>(max_p * dtype_size(o.mixed_precision.param_dtype), 64);
  if (plan.params_sharded) at(MemCategory::kUnshardedParams) += extra_slot;
  if (!plan.grads_persist) at(MemCategory::kUnshardedGrads) += extra_slot;
  // Activations and workspace, as GptModel allocates them (f32 compute).
  const std::uint64_t B = static_cast<std::uint64_t>(cfg.batch), T = static_cast<std::uint64_t>(cfg.seq);
  const std::uint64_t N = B * T, C = static_cast<std::uint64_t>(cfg.model.embd);
  const std::uint64_t L = static_cast<std::uint64_t>(cfg.model.layers), H = static_cast<std::uint64_t>(cfg.model.heads);
  const std::uint64_t V = static_cast<std::uint64_t>(cfg.model.vocab);
  const std::uint64_t block = 15 * N * C + 4 * N + H * N;  // ln1, stats, qkv, attention out, lse, x_mid, ln2, MLP
  at(MemCategory::kActivations) = 4 * ((L + 1) * N * C + (cfg.recompute ? 0 : L * block) + N * C + 3 * N + N * V);
  // Workspace: f32 parameters and gradients of the embeddings and of the largest other unit, the scratch, the block's
  // activations under recomputation, and the int32 input and target tokens [N] (beside Strata's norm buffer).
  at(MemCategory::kWorkspace) += 4 * (2 * emb_p + 2 * max_other_p + 16 * N * C + (cfg.recompute ? block : 0) + 2 * N);
  return b;
}

CategoryBytes predict_host_memory(const TrainConfig& cfg, int world) {
  return predict_state_memory(gpt_units(cfg.model), cfg.sharding, groups(cfg, world), 2).host;
}

std::string fit_advice(const TrainConfig& cfg, int world, std::uint64_t budget) {
  auto mib = [](std::uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  const std::uint64_t now = total(predict_step_memory(cfg, world));
  if (now <= budget)
    return fmt::format(
        "the prediction for this configuration ({:.1f} MiB per rank) is within the budget of {:.1f} "
        "MiB left to it: what else allocates on the device?",
        mib(now), mib(budget));
  PlanInput in;
  in.model = ModelShape{0, cfg.model.layers, cfg.model.embd, cfg.model.heads, cfg.model.vocab, cfg.seq};
  in.layout.dp = world;
  in.layout.stage = cfg.sharding.stage;
  in.layout.dp_replicate = cfg.dp_replicate;
  in.precision = cfg.sharding.mixed_precision;
  in.micro_batch = cfg.batch;
  in.recompute = cfg.recompute;
  in.prefetch_depth = cfg.sharding.prefetch_depth;
  in.offload = cfg.sharding.offload;
  std::string best;
  for (const PlanChange& change : fit_changes(in)) {
    if (change.in.layout.tp != 1 || change.in.layout.pp != 1) continue;  // train_gpt is data-parallel only
    TrainConfig c = cfg;
    c.sharding.stage = change.in.layout.stage;
    c.sharding.offload = change.in.offload;
    c.recompute = change.in.recompute;
    const std::uint64_t need = total(predict_step_memory(c, world));
    if (need <= budget)
      return fmt::format(
          "predicted {:.1f} MiB per rank against the {:.1f} MiB of the budget left to training; the cheapest change "
          "that fits: {} ({:.1f} MiB per rank predicted)",
          mib(now), mib(budget), change.what, mib(need));
  }
  return fmt::format(
      "predicted {:.1f} MiB per rank against the {:.1f} MiB of the budget left to training, and no change of stage, "
      "recomputation or offload fits: use more ranks, a smaller --batch or --seq, or more memory",
      mib(now), mib(budget));
}

TpTraffic predict_tp_traffic(const TrainConfig& cfg) {
  TpTraffic t;
  if (cfg.tp == 1) return t;
  const std::uint64_t N = static_cast<std::uint64_t>(cfg.batch) * cfg.seq, C = static_cast<std::uint64_t>(cfg.model.embd);
  const std::uint64_t L = static_cast<std::uint64_t>(cfg.model.layers), A = static_cast<std::uint64_t>(cfg.grad_accum);
  // Per micro-batch: the embedding (1), two row-parallel outputs per block in the forward (again under
  // recomputation), the LM head's input gradient (1) and two column-parallel input gradients per block; the loss's
  // row maxima, sums and target logits (3N floats).
  const std::uint64_t reductions = 1 + 2 * L + (cfg.recompute ? 2 * L : 0) + 1 + 2 * L;
  if (!cfg.sequence_parallel) {
    t.all_reduce_bytes = A * 4 * (reductions * N * C + 3 * N);
    t.calls = A * (reductions + 2);
    return t;
  }
  // Sequence parallelism: each reduction becomes a reduce-scatter, and the whole sequence is gathered before each
  // column-parallel matmul (two per block, again under recomputation), before the LM head, before each row-parallel
  // matmul's backward (two per block) and before the embedding's backward. The replicated parameters' gradients
  // (LayerNorms, wpe) are summed over tp.
  const std::uint64_t gathers = 2 * L + (cfg.recompute ? 2 * L : 0) + 1 + 2 * L + 1;
  t.reduce_scatter_bytes = A * 4 * reductions * N * C;
  t.all_gather_bytes = A * 4 * gathers * N * C;
  t.all_reduce_bytes = A * 4 * (3 * N + L * 4 * C + 2 * C + static_cast<std::uint64_t>(cfg.model.ctx) * C);
  t.calls = A * (reductions + gathers + 2 + 4 * L + 2 + 1);
  return t;
}

std::string prediction_table(const CategoryBytes& predicted, const CategoryBytes& measured) {
  std::string out = fmt::format("  {:<18} {:>14} {:>14} {:>9}\n", "category", "predicted", "measured", "ratio");
  for (std::size_t i = 0; i < kNumMemCategories; ++i) {
    if (predicted[i] == 0 && measured[i] == 0) continue;
    double ratio = predicted[i] ? static_cast<double>(measured[i]) / static_cast<double>(predicted[i]) : 0.0;
    out += fmt::format("  {:<18} {:>14} {:>14} {:>9.4f}\n", mem_category_name(static_cast<MemCategory>(i)),
                       predicted[i], measured[i], ratio);
  }
  return out;
}

}  // namespace strata::gpt
