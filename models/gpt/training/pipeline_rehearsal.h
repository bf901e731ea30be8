// rehearse_pools: how many gathered-parameter and unsharded-gradient slots a pipeline rank's step holds at once, from
// running that rank's step for real (the memory planner's pipeline term).
#pragma once

#include <cstdint>

#include "models/gpt/training/train_config.h"
#include "runtime/memory/step_memory.h"

namespace strata::gpt {

using strata::PoolPeaks;  // runtime/memory/step_memory.h

// Runs pp rank `pp_rank`'s step of `cfg` in this process: the rank's units (the same units, slots and flags, every
// tensor one element wide across a model of width 1) over one-rank groups (SelfCommunicator) on a CPU device of
// their own, through the real ShardedModel, GptModel, GptPipelineStage and a rehearsal PipelineExecutor (the rank's
// forwards and backwards in its list's order, no transfers), with the trainer's prefetch lists and reduction
// protocol. Returns the pools' slot counts after it: the pools grow to the most slots in use at once, so no copy of
// the protocol is kept here to drift from it. cfg must be pipelined().
PoolPeaks rehearse_pools(const TrainConfig& cfg, int pp_rank);

}  // namespace strata::gpt
