// The family's parallelize step (torchtitan's parallelize_llama): from a model and a rank's place in the mesh, what its
// ShardedModel holds and how it runs. The pipeline part its pp rank holds (its chunks of layers; the embeddings, ln_f
// and the head at the ends), its units split over tp (gpt_units: q | k | v and the MLP's up product by columns, the
// two output products by rows, wte by vocabulary rows, the rest replicated), the sharding options (a pipeline that
// keeps its chunks gathered does not reshard after the forward) and the prefetch within each chunk. GptTrainer, the
// pipeline rehearsal, the memory prediction and the decoder take their units and options from here.
#pragma once

#include <vector>

#include "models/gpt/model/gpt_model.h"
#include "runtime/parallel/pipeline_schedule.h"
#include "runtime/sharding/sharded_model.h"

namespace strata::gpt {

struct GptPlan {
  GptStagePart part;            // the whole model without a pipeline
  GptStageUnits places;         // where the part's units are among `units`
  std::vector<UnitSpec> units;  // this tp rank's slices of the part's units, in ShardedModel's order
  ShardingOptions sharding;     // as the ShardedModel runs with them
  // Sets the model's prefetch lists: within each chunk of an interleaved part (set_chunk_prefetch), ShardedModel's
  // own otherwise.
  void apply(ShardedModel& model) const;
};

// The plan of pp rank `pp_rank` under `schedule` (null: no pipeline, the whole model), tp degree `tp`, from the run's
// sharding options; `keep_gathered`: the pipeline keeps its chunks' parameters gathered through the step.
GptPlan parallelize(const GptConfig& model, int tp, const ShardingOptions& sharding,
                    const PipelineSchedule* schedule = nullptr, int pp_rank = 0, bool keep_gathered = false);

}  // namespace strata::gpt
