// predict_step_memory: the arithmetic behind each ledger category for the GPT trainer.
#include "examples/gpt/gpt_memory.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/memory/memory_planner.h"
#include "runtime/sharding/shard_layout.h"
#include "runtime/sharding/sharded_unit.h"

namespace strata::gpt {

CategoryBytes predict_step_memory(const TrainConfig& cfg, int world) {
  const ShardingOptions& o = cfg.sharding;
  const StagePlan plan = StagePlan::from(o);
  const std::uint64_t psz = dtype_size(o.mixed_precision.param_dtype);
  const std::uint64_t rsz = dtype_size(o.mixed_precision.reduce_dtype);
  const int shard = o.stage == ZeroStage::kNone ? 1 : o.shard_group_size(world, world);
  std::uint64_t sum_p = 0, sum_s = 0, max_p = 0, max_s = 0, emb_p = 0, max_other_p = 0;
  auto units = gpt_units(cfg.model);
  for (std::size_t u = 0; u < units.size(); ++u) {
    ShardLayout l(units[u].slots, shard, o.align_elements);
    sum_p += l.padded_numel();
    sum_s += l.shard_numel();
    max_p = std::max<std::uint64_t>(max_p, l.padded_numel());
    max_s = std::max<std::uint64_t>(max_s, l.shard_numel());
    if (u == 0)
      emb_p = l.padded_numel();
    else
      max_other_p = std::max<std::uint64_t>(max_other_p, l.padded_numel());
  }
  auto slot = [](std::uint64_t bytes) { return std::max<std::uint64_t>(bytes, 64); };  // BufferPool's minimum
  CategoryBytes b{};
  auto at = [&](MemCategory c) -> std::uint64_t& { return b[static_cast<std::size_t>(c)]; };
  // Offloaded parameter shards are staged on the device one per gather in flight (prefetch depth + 1).
  at(MemCategory::kParamShard) = plan.offload_params
                                     ? static_cast<std::uint64_t>(o.prefetch_depth + 1) * slot(max_s * psz)
                                 : plan.params_sharded ? sum_s * psz
                                                       : 0;
  if (!plan.offload_optimizer) {
    at(MemCategory::kMaster) = plan.separate_master ? sum_s * 4 : 0;
    at(MemCategory::kGradShard) = sum_s * 4;
    at(MemCategory::kOptimState) = sum_s * 8;
  }
  // The trainer keeps the embeddings unit (the tied LM head) gathered from the first forward to the head, and its
  // gradients open through the whole backward: one pool slot more than prefetch depth + 1 and than 2.
  at(MemCategory::kUnshardedParams) =
      plan.params_sharded ? static_cast<std::uint64_t>(o.prefetch_depth + 2) * slot(max_p * psz) : sum_p * psz;
  at(MemCategory::kUnshardedGrads) = plan.grads_persist ? sum_p * psz : 3 * slot(max_p * psz);
  // Reduction staging: two reduce-output slots, two conversion slots when the dtypes differ, and the MPI lane's
  // grow-only scratch for the largest reduction (an all-to-all of the unit, or stage 0's padded all-reduce).
  const std::uint64_t n = static_cast<std::uint64_t>(world);
  std::uint64_t lane = plan.reduce_is_all_reduce ? 2 * n * ((max_p + n - 1) / n) * rsz : n * max_s * rsz;
  if (shard > 1) lane = std::max<std::uint64_t>(lane, 2 * n * 8);  // the norm's f64 all-reduce
  const bool convert = o.mixed_precision.reduce_dtype != o.mixed_precision.param_dtype;
  at(MemCategory::kCommBuffer) = 2 * slot(max_s * rsz) + (convert ? 2 * slot(max_p * rsz) : 0) + lane;
  // Activations and workspace, as GptModel allocates them (f32 compute).
  const std::uint64_t B = static_cast<std::uint64_t>(cfg.batch), T = static_cast<std::uint64_t>(cfg.seq);
  const std::uint64_t N = B * T, C = static_cast<std::uint64_t>(cfg.model.embd);
  const std::uint64_t L = static_cast<std::uint64_t>(cfg.model.layers), H = static_cast<std::uint64_t>(cfg.model.heads);
  const std::uint64_t V = static_cast<std::uint64_t>(cfg.model.vocab);
  const std::uint64_t block = 15 * N * C + 4 * N + H * N;  // ln1, stats, qkv, attention out, lse, x_mid, ln2, MLP
  at(MemCategory::kActivations) = 4 * ((L + 1) * N * C + (cfg.recompute ? 0 : L * block) + N * C + 3 * N + N * V);
  // Workspace: f32 parameters and gradients of the embeddings and of the largest other unit, the scratch, the block's
  // activations under recomputation, the int32 input and target tokens [N], and ShardedModel's 8-byte norm buffer.
  at(MemCategory::kWorkspace) =
      4 * (2 * emb_p + 2 * max_other_p + 16 * N * C + (cfg.recompute ? block : 0) + 2 * N) + 8;
  return b;
}

CategoryBytes predict_host_memory(const TrainConfig& cfg, int world) {
  const ShardingOptions& o = cfg.sharding;
  const StagePlan plan = StagePlan::from(o);
  CategoryBytes b{};
  if (!plan.offload_optimizer) return b;
  const std::uint64_t psz = dtype_size(o.mixed_precision.param_dtype);
  const std::uint64_t rsz = dtype_size(o.mixed_precision.reduce_dtype);
  const int shard = o.stage == ZeroStage::kNone ? 1 : o.shard_group_size(world, world);
  std::uint64_t sum_s = 0, max_s = 0;
  for (const UnitSpec& u : gpt_units(cfg.model)) {
    ShardLayout l(u.slots, shard, o.align_elements);
    sum_s += l.shard_numel();
    max_s = std::max<std::uint64_t>(max_s, l.shard_numel());
  }
  auto slot = [](std::uint64_t bytes) { return std::max<std::uint64_t>(bytes, 64); };
  auto at = [&](MemCategory c) -> std::uint64_t& { return b[static_cast<std::size_t>(c)]; };
  at(MemCategory::kParamShard) = plan.offload_params ? sum_s * psz : 0;
  at(MemCategory::kMaster) = plan.separate_master ? sum_s * 4 : 0;
  at(MemCategory::kGradShard) = sum_s * 4;
  at(MemCategory::kOptimState) = sum_s * 8;
  // Landing slots for two reduced gradient shards, and two upload slots when parameters are cast before the copy.
  const bool upload_slots = !plan.offload_params && o.mixed_precision.param_dtype != DType::kF32;
  at(MemCategory::kCommBuffer) = 2 * slot(max_s * rsz) + (upload_slots ? 2 * slot(max_s * psz) : 0);
  return b;
}

std::uint64_t total(const CategoryBytes& b) {
  std::uint64_t t = 0;
  for (std::uint64_t x : b) t += x;
  return t;
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
  in.layout.hybrid_shard_size = cfg.sharding.hybrid_shard_size;
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
          "that "
          "fits: {} ({:.1f} MiB per rank predicted)",
          mib(now), mib(budget), change.what, mib(need));
  }
  return fmt::format(
      "predicted {:.1f} MiB per rank against the {:.1f} MiB of the budget left to training, and no change of stage, "
      "recomputation or offload fits: use more ranks, a smaller --batch or --seq, or more memory",
      mib(now), mib(budget));
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
