// TrainConfig: what one GPT training run is (model, batch, optimizer, sharding, tp/pp layout, checkpoints), and the
// checks that it fits a job, made once before anything is allocated.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "models/gpt/model/gpt_model.h"
#include "runtime/checkpoint/checkpointer.h"
#include "runtime/optim/adamw.h"
#include "runtime/optim/sharded_adamw.h"
#include "runtime/parallel/pipeline_schedule.h"
#include "runtime/sharding/sharding_options.h"

namespace strata::gpt {

struct TrainConfig {
  GptConfig model;
  int seq = 8;
  int batch = 4;  // rows per data-parallel rank per micro-batch (the tp ranks of a group share them)
  int grad_accum = 1;
  AdamWConfig adamw{1e-3, 0.9, 0.95, 1e-8, 0.1};
  // Learning rate per step (runtime/optim/adamw.h's LrSchedule): constant adamw.lr (the spec's default) unless a
  // warmup or a decay is asked for; a decay reaches min_lr at step decay_steps (the run's --steps).
  std::int64_t warmup_steps = 0;
  LrDecay lr_decay = LrDecay::kConstant;
  std::int64_t decay_steps = 0;
  double min_lr = -1;  // < 0: adamw.lr / 10 (nanoGPT's and llm.c's floor)
  double decay_fraction = 0.2;  // wsd: the share of the steps after the warmup that decay
  LrSchedule lr_schedule() const;
  double lr_at(int step) const { return lr_schedule().at(step); }
  ShardingOptions sharding;
  OptimizerOptions optimizer;  // clipping and loss scaling
  int dp_replicate = 1;        // hybrid sharding: the state is sharded over world / (tp * dp_replicate) ranks
  int tp = 1;                  // tensor-parallel degree (consecutive ranks); data parallelism is what is left
  bool sequence_parallel = false;
  // Context parallelism (runtime/context): each row's sequence split over cp ranks in mirrored chunks, attention by
  // ring; the cp ranks read the same rows and hold the same parameters (sharded over dp_shard x cp).
  int cp = 1;
  int local_seq() const { return seq / cp; }  // tokens of a row on one rank
  // Pipeline parallelism (docs/pipeline-parallel.md): pp stages (the outermost mesh dimension), run by a schedule of
  // `microbatches` micro-batches. With microbatches > 1, `batch` is the step's rows per data-parallel rank and each
  // micro-batch takes batch / microbatches of them (also at pp 1: gradient accumulation through the schedule).
  int pp = 1;
  PipelineScheduleKind pp_schedule = PipelineScheduleKind::kOneFOneB;
  int pp_virtual = 1;
  int microbatches = 0;         // 0: pp (one per stage)
  bool pp_keep_gathered = true;  // reduce once per step and keep ZeRO-3 units gathered between micro-batches
  int micro_batches() const { return microbatches > 0 ? microbatches : pp; }
  bool pipelined() const { return pp > 1 || micro_batches() > 1; }
  // Rows of one micro-batch on a data-parallel rank, and micro-batches per step (a pipeline's or --grad-accum's).
  int micro_batch_rows() const { return pipelined() ? batch / micro_batches() : batch; }
  int micro_batches_per_step() const { return pipelined() ? micro_batches() : grad_accum; }
  // Every check of the configuration against itself and a job of `world` ranks (kInvalidArgument naming the flags),
  // before anything is allocated: GptTrainer's constructor calls it, once.
  void validate(int world) const;
  // The pipeline's part of it (the schedule, the layers and micro-batches), which the memory planner also needs.
  void validate_pipeline() const;
  // Context parallelism's part: cp x tp x pp dividing the world, --seq splitting into 2 cp chunks, and what the ring
  // does not compose with yet (kUnsupported).
  void validate_context(int world) const;
  bool tp_kernels = false;     // the tensor-parallel data flow even at tp 1 (tests; GptParallel::tp_kernels)
  // What each block keeps for its backward (runtime/memory/recompute_policy.h). automatic: the trainer chooses a kind
  // per block from the device budget (GptTrainer's constructor) before the model is built.
  RecomputePolicy recompute;
  GptPrecision precision;  // f32, or bf16 products (train_gpt --compute-dtype)
  std::string init;  // safetensors file; empty: the spec's distributions from `seed`
  std::uint64_t seed = 1;
  bool shuffle = false;  // the training data's windows in a seeded order per epoch (TokenFile::shuffle_windows, seed)
  // Checkpoints (docs/checkpoint.md), when checkpoint.dir is set: one every `checkpoint_every` steps (0: none on the
  // way) and one after the last step (finish()). `resume` continues from the directory's latest committed one.
  CheckpointOptions checkpoint;
  int checkpoint_every = 0;
  bool resume = false;
  nlohmann::json to_json() const;  // the configuration, for the record
};

}  // namespace strata::gpt
