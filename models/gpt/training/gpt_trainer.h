// GptTrainer: one training run of the spec's GPT-2 on Strata (model, init, data windows, steps, saving), shared
// by train_gpt and the tests.
#pragma once

#include <memory>
#include <string>

#include "models/gpt/model/gpt_model.h"
#include "models/gpt/parallel/gpt_pipeline_stage.h"
#include "models/gpt/training/gpt_trainer_state.h"
#include "models/gpt/data/token_data.h"
#include "runtime/bootstrap/runtime.h"
#include "runtime/checkpoint/checkpointer.h"
#include "runtime/optim/adamw.h"
#include "runtime/optim/sharded_adamw.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/parallel/pipeline_executor.h"
#include "runtime/parallel/pipeline_schedule.h"
#include "runtime/sharding/sharded_model.h"

namespace strata::gpt {

struct TrainConfig {
  GptConfig model;
  int seq = 8;
  int batch = 4;  // rows per data-parallel rank per micro-batch (the tp ranks of a group share them)
  int grad_accum = 1;
  AdamWConfig adamw{1e-3, 0.9, 0.95, 1e-8, 0.1};
  // Learning rate per step: constant adamw.lr (the spec's default) unless warmup or cosine decay is asked for.
  std::int64_t warmup_steps = 0;
  std::int64_t cosine_steps = 0;  // > 0: cosine decay from adamw.lr to adamw.lr / 10 at this step
  double lr_at(int step) const;
  ShardingOptions sharding;
  OptimizerOptions optimizer;  // clipping and loss scaling
  int dp_replicate = 1;        // hybrid sharding: the state is sharded over world / (tp * dp_replicate) ranks
  int tp = 1;                  // tensor-parallel degree (consecutive ranks); data parallelism is what is left
  bool sequence_parallel = false;
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
  // kInvalidArgument naming the flags when the pipeline settings do not fit the model and the batch.
  void validate_pipeline() const;
  bool tp_kernels = false;     // the tensor-parallel data flow even at tp 1 (tests; GptParallel::tp_kernels)
  bool recompute = false;
  GptPrecision precision;  // f32, or bf16 products (train_gpt --compute-dtype)
  std::string init;  // safetensors file; empty: the spec's distributions from `seed`
  std::uint64_t seed = 1;
  // Checkpoints (docs/checkpoint.md), when checkpoint.dir is set: one every `checkpoint_every` steps (0: none on the
  // way) and one after the last step (finish()). `resume` continues from the directory's latest committed one.
  CheckpointOptions checkpoint;
  int checkpoint_every = 0;
  bool resume = false;
  nlohmann::json to_json() const;  // the configuration, for the record
};

struct StepRecord {
  int step = 0;
  double loss = 0;       // mean over ranks and micro-batches, with the weights before this step's update
  double time_ms = 0;
  double grad_norm = 0;  // global, before clipping
  bool skipped = false;
  float loss_scale = 1;
  TpTraffic tp_traffic;      // the tensor-parallel collectives of this step (this rank)
  double checkpoint_ms = 0;  // this step's stall for checkpointing (the save, or an asynchronous save's commit)
};

class GptTrainer {
 public:
  GptTrainer(Runtime& runtime, const TrainConfig& config, const TokenFile& data);
  ~GptTrainer();

  // The first step to run: 0, or the step after the checkpoint a resume loaded.
  int start_step() const { return start_step_; }
  // The checkpoint step a resume loaded, or -1.
  std::int64_t resumed_from() const { return resumed_from_; }
  // What the resume warned about (newer checkpoints passed over, another data file, ...): printed by train_gpt,
  // kept in the run's record and in the trainer state of the checkpoints it writes.
  const std::vector<std::string>& resume_notes() const { return resume_notes_; }
  // One optimizer step (collective); checkpoints after it when it is due.
  StepRecord step(int step);
  // After the last step: a checkpoint of where the trainer stands (unless it is the one just written or loaded), and
  // any save in flight committed.
  void finish();
  ShardedModel& model() { return *model_; }
  ShardedAdamW& optimizer() { return *optimizer_; }
  Checkpointer* checkpointer() { return checkpointer_.get(); }
  std::size_t parameters() const { return parameters_; }
  DeviceMesh& mesh() { return *mesh_; }
  // The pipeline schedule (pipelined() runs only), and this rank's part of the model.
  const PipelineSchedule* schedule() const { return schedule_.get(); }
  const GptStagePart& stage_part() const { return part_; }
  GptModel& gpt() { return *gpt_; }
  // Collective: writes the weights under the spec's names as one F32 safetensors file. Each value is written once,
  // by the rank that owns it, at its place in the file (a shared file system): no rank gathers the model.
  void save(const std::string& path);

 private:
  // Runs fn; an allocation over the device budget is rethrown with the planner's advice appended.
  template <typename Fn>
  void with_fit_advice(Fn&& fn);
  // The constructor's steps: the configuration's checks (before anything is allocated), the schedule and this
  // rank's part of a pipeline, the parallelize step (norm groups, counted mask, the tied pair, the sharded model and
  // optimizer, prefetch within chunks), and weights from --init.
  void check_config() const;
  void build_pipeline();
  void parallelize();
  void init_from_file();
  // What a checkpoint keeps of the trainer: the step and data position it stands at, the seed, the configuration.
  nlohmann::json trainer_state() const;
  // --resume: the directory's resume plan, the load, and the checks of the trainer state against this run.
  void resume();

  Runtime& rt_;
  TrainConfig cfg_;
  const TokenFile& data_;
  std::uint64_t baseline_bytes_;  // device bytes in use before this trainer allocated anything
  std::unique_ptr<DeviceMesh> mesh_;
  std::unique_ptr<ShardedModel> model_;
  std::unique_ptr<ShardedAdamW> optimizer_;
  std::unique_ptr<GptModel> gpt_;
  std::unique_ptr<Checkpointer> checkpointer_;
  GptStagePart part_;
  std::unique_ptr<PipelineSchedule> schedule_;
  std::unique_ptr<PipelineExecutor> executor_;
  std::unique_ptr<GptPipelineStage> stage_;
  std::unique_ptr<Communicator> tied_;  // first and last stage of one pipeline (pp > 1): sums the tied wte's gradients
  int tied_unit_ = -1;                  // this rank's unit in that pair
  // Sums the embeddings' gradient shards over the first and last stage (the tie of wte and the LM head).
  void sum_tied_grads();
  std::vector<std::int32_t> inputs_, targets_;
  std::size_t parameters_ = 0;
  std::uint64_t rows_done_ = 0;  // global rows consumed (the data position a checkpoint keeps)
  int start_step_ = 0;
  int next_step_ = 0;             // the step the trainer stands at: start_step_, then one past the last step run
  std::int64_t resumed_from_ = -1;
  std::vector<std::string> resume_notes_;
  GptDataRecord data_record_;  // the data this run reads, as its checkpoints record it
  std::int64_t saved_step_ = -1;  // the last step checkpointed or loaded
};

}  // namespace strata::gpt
