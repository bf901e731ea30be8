// ShardingOptions: the ZeroStage, the MixedPrecisionPolicy, prefetch and offload, as data. Which ranks shard and which
// replicate is the DeviceMesh's (dp_shard x dp_replicate); clipping and loss scaling are the optimizer's.
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
  // ZeRO-3: free gathered parameters after forward (true) or keep them for backward (false).
  bool reshard_after_forward = true;
  // How many units ahead to gather by default: forward gathers unit i+1..i+depth while unit i computes, backward
  // i-1..; 0 turns prefetch off. A schedule may set explicit lists instead (ShardedModel::set_forward_prefetch).
  // See docs/notes/prefetch.md.
  int prefetch_depth = 1;
  // Host memory for the optimizer (and the parameter shards); see docs/notes/offload.md.
  OffloadPolicy offload = OffloadPolicy::kNone;
  // Shards are padded so that every rank's shard is a multiple of this many elements.
  std::size_t align_elements = 16;

  // Throws kInvalidArgument naming the offending values.
  void validate() const;
  std::string describe() const;
};

}  // namespace strata
