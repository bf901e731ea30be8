// parallelize: a rank's part, units, sharding options and prefetch, for every caller alike.
#include "models/gpt/parallel/gpt_parallelize.h"

#include <algorithm>

#include "models/gpt/parallel/gpt_pipeline_stage.h"

namespace strata::gpt {

void GptPlan::apply(ShardedModel& model) const { set_chunk_prefetch(model, places, sharding.prefetch_depth); }

GptPlan parallelize(const GptConfig& model, int tp, const ShardingOptions& sharding, const PipelineSchedule* schedule,
                    int pp_rank, bool keep_gathered) {
  GptPlan plan;
  plan.sharding = sharding;
  plan.part.tied = model.tied;
  if (schedule) {
    plan.part = GptStagePart::of_rank(model, schedule->pp(), schedule->virtual_stages(), pp_rank,
                                      std::max(1, schedule->max_in_flight(pp_rank)));
    if (keep_gathered) plan.sharding.reshard_after_forward = false;
  }
  plan.places = stage_units(model, plan.part);
  plan.units = gpt_units(model, tp, plan.part);
  return plan;
}

}  // namespace strata::gpt
