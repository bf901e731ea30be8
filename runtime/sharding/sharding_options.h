// ShardingOptions: the ZeroStage, the MixedPrecisionPolicy, hybrid sharding and gradient accumulation, as data.
#pragma once

#include <cstddef>
#include <string>

#include "core/dtype.h"

namespace strata {

// What is sharded across the data-parallel (shard) group. One code path serves all four; see ShardedUnit.
enum class ZeroStage {
  kNone = 0,            // DDP: full parameters, gradients and optimizer state everywhere; all-reduce of gradients
  kOptimizerState = 1,  // ZeRO-1: master weights and Adam state sharded
  kGradients = 2,       // ZeRO-2: ... and gradients reduce-scattered into shards
  kParameters = 3,      // ZeRO-3 (FSDP full shard): ... and parameters sharded, gathered per unit
};
const char* zero_stage_name(ZeroStage s);
ZeroStage zero_stage_from_int(int stage);  // 0..3, else kInvalidArgument

// Parameters are gathered and computed in param_dtype; gradients are reduced in reduce_dtype; master weights and
// optimizer state are always f32. On the CPU backend bf16 / f16 are storage and communication types only.
struct MixedPrecisionPolicy {
  DType param_dtype = DType::kF32;
  DType reduce_dtype = DType::kF32;
};

enum class GradAccumulation {
  kReduceEveryMicroBatch,  // reduce-scatter after every micro-batch, accumulate into the f32 shard (low memory)
  kNoSync,                 // accumulate unsharded gradients, reduce once on the last micro-batch
};

// Where the sharded state lives (FSDP2's CPUOffloadPolicy, DeepSpeed's offload_optimizer / offload_param).
enum class OffloadPolicy {
  kNone,                // everything on the device
  kOptimizer,           // f32 master, gradient shard and Adam m, v in host memory; AdamW runs on the host
  kOptimizerAndParams,  // ... and the parameter shards too (ZeRO-3): each is copied to the device before its gather
};
const char* offload_name(OffloadPolicy p);  // "none", "optimizer", "optimizer+params"
OffloadPolicy offload_from_name(const std::string& name);  // kInvalidArgument for anything else

struct ShardingOptions {
  ZeroStage stage = ZeroStage::kParameters;
  MixedPrecisionPolicy mixed_precision;
  // Hybrid sharding (HSDP): shard within groups of this many consecutive ranks and all-reduce across groups.
  // 0: shard over the whole world. -1: one group per node (ranks per node).
  int hybrid_shard_size = 0;
  // ZeRO-3: free gathered parameters after forward (true) or keep them for backward (false).
  bool reshard_after_forward = true;
  GradAccumulation grad_accumulation = GradAccumulation::kReduceEveryMicroBatch;
  // How many units ahead to gather: forward gathers unit i+1..i+depth while unit i computes, backward i-1..
  // 0 turns prefetch off. See docs/notes/prefetch.md.
  int prefetch_depth = 1;
  // Host memory for the optimizer (and the parameter shards); see docs/notes/offload.md.
  OffloadPolicy offload = OffloadPolicy::kNone;
  // Shards are padded so that every rank's shard is a multiple of this many elements.
  std::size_t align_elements = 16;
  // Global gradient-norm clipping threshold; <= 0 disables clipping (the norm is still computed and returned).
  double grad_clip = 0.0;
  // Dynamic loss scaling (f16): initial scale, growth every `loss_scale_window` good steps, halving on overflow.
  bool dynamic_loss_scale = false;
  float initial_loss_scale = 65536.0f;
  int loss_scale_window = 1000;

  // Throws kInvalidArgument naming the offending values. world_size and local_size are the job's.
  void validate(int world_size, int local_size) const;
  // The shard group size these options give on this job.
  int shard_group_size(int world_size, int local_size) const;
  std::string describe() const;
};

}  // namespace strata
