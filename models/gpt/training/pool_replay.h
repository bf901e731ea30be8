// PoolReplay: how many gathered-parameter and unsharded-gradient slots a pipeline rank's step holds at once, by replaying
// the ShardedModel protocol calls GptModel makes along the rank's schedule (the memory planner's pipeline term).
#pragma once

#include <cstdint>
#include <vector>

#include "models/gpt/model/gpt_model.h"
#include "runtime/parallel/pipeline_schedule.h"

namespace strata::gpt {

struct PoolPeaks {
  std::uint64_t params = 0;  // gathered parameter slots in use at once (ZeRO-3)
  std::uint64_t grads = 0;   // unsharded gradient slots in use at once (ZeRO-2 and 3)
};

// `units`: the rank's (stage_units); `prefetch`: ShardingOptions::prefetch_depth, within a chunk as GptTrainer sets it.
// keep_gathered: GptPipelineStage's default (reduce once per unit per step, ZeRO-3 units gathered through the step).
PoolPeaks replay_pools(const std::vector<PipelineAction>& list, int pp, const GptStageUnits& units, int prefetch,
                       bool keep_gathered);

}  // namespace strata::gpt
