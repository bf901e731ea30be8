// rehearse_pools: one pipeline rank's step of a GPT of width 1, run through the real protocol (the library's
// rehearse_pools), its pools counted.
#include "models/gpt/training/pipeline_rehearsal.h"

#include "core/error.h"
#include "models/gpt/data/token_data.h"
#include "models/gpt/model/gpt_model.h"
#include "models/gpt/parallel/gpt_parallelize.h"
#include "models/gpt/parallel/gpt_pipeline_stage.h"
#include "runtime/memory/pool_rehearsal.h"
#include "runtime/parallel/pipeline_executor.h"
#include "runtime/parallel/pipeline_schedule.h"

namespace strata::gpt {

PoolPeaks rehearse_pools(const TrainConfig& cfg, int pp_rank) {
  STRATA_CHECK(cfg.pipelined(), "rehearse_pools: the configuration has no pipeline");
  // Width, heads, vocabulary and sequence change the sizes of the slots, not how many are in use: the units, their
  // order and the calls on them depend on the layers, the schedule and the options only.
  GptConfig tiny{cfg.model.layers, 1, 1, 2, 1};
  if (cfg.model.llama()) {  // the family's units (an untied head is one more), at its smallest valid shape
    tiny.family = Family::kLlama;
    tiny.embd = 2;
    tiny.ffn = 1;
    tiny.tied = cfg.model.tied;
    tiny.qkv_bias = cfg.model.qkv_bias;
  }
  const int seq = 1, rows = 1;
  const PipelineSchedule schedule =
      PipelineSchedule::build(cfg.pp_schedule, cfg.pp, cfg.micro_batches(), cfg.pp_virtual);
  PipelineExecutor executor(schedule, pp_rank);
  const GptPlan plan = parallelize(tiny, 1, cfg.sharding, &schedule, pp_rank, cfg.pp_keep_gathered);  // as GptTrainer
  const GptStagePart& part = plan.part;
  // Recomputation changes no unit's calls: an automatic policy not chosen yet rehearses as none.
  const RecomputePolicy recompute =
      cfg.recompute.automatic && cfg.recompute.per_layer.empty() ? RecomputePolicy{} : cfg.recompute;
  return strata::rehearse_pools(plan.units, plan.sharding, [&](ShardedModel& model, Communicator& self) {
    plan.apply(model);
    GptParallel parallel;
    parallel.tp = &self;
    GptModel gpt(tiny, model, self.device(), rows, seq, recompute, parallel, part, cfg.precision);
    const TokenFile data = TokenFile::from_tokens(synthetic_tokens(64, tiny.vocab, 1), seq, tiny.vocab, "<rehearsal>");
    GptPipelineStage stage(gpt, model, data, rows, seq, 1, 0, cfg.pp_keep_gathered);
    stage.begin_step(0, 1.0f);
    executor.run_step(stage);
  });
}

}  // namespace strata::gpt
