// GptTrainer: one training run of the spec's GPT-2 on Strata (model, init, data windows, steps, saving), shared
// by train_gpt and the tests.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/safetensors.h"
#include "models/gpt/model/gpt_model.h"
#include "models/gpt/parallel/gpt_pipeline_stage.h"
#include "models/gpt/training/gpt_trainer_state.h"
#include "models/gpt/training/train_config.h"
#include "models/gpt/data/token_data.h"
#include "runtime/context/context_chunks.h"
#include "runtime/bootstrap/runtime.h"
#include "runtime/checkpoint/checkpointer.h"
#include "runtime/optim/adamw.h"
#include "runtime/optim/sharded_adamw.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/parallel/pipeline_executor.h"
#include "runtime/parallel/pipeline_schedule.h"
#include "runtime/sharding/sharded_model.h"
#include "runtime/tensor/tied_parameters.h"

namespace strata::gpt {

struct StepRecord {
  int step = 0;
  double loss = 0;       // mean over ranks and micro-batches, with the weights before this step's update
  double lr = 0;         // the learning rate of this step's update
  double time_ms = 0;
  double grad_norm = 0;  // global, before clipping
  bool skipped = false;
  float loss_scale = 1;
  TpTraffic tp_traffic;      // the tensor-parallel collectives of this step (this rank)
  std::uint64_t cp_bytes = 0;  // what this rank sent round the context-parallel ring this step
  double checkpoint_ms = 0;  // this step's stall for checkpointing (the save, or an asynchronous save's commit)
  double data_ms = 0;        // reading this rank's rows' windows from the data (the loader's share of the step)
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
  // Collective, between steps: the mean loss of the current weights over `batches` batches of `data`, each the rows a
  // training step reads (dp x --batch x --grad-accum), from row 0 by the training window rule: the same windows at
  // every call and, for one global batch, at every layout (dp, tp, pp, cp). Forwards only: no gradient, no update,
  // the weights and the training data position untouched. Every rank returns the same value.
  double evaluate(const TokenFile& data, int batches);
  // The configuration as run: --recompute auto's choice made (a kind per block).
  const TrainConfig& config() const { return cfg_; }
  ShardedModel& model() { return *model_; }
  ShardedAdamW& optimizer() { return *optimizer_; }
  Checkpointer* checkpointer() { return checkpointer_.get(); }
  std::size_t parameters() const { return parameters_; }
  DeviceMesh& mesh() { return *mesh_; }
  // The pipeline schedule (pipelined() runs only), and this rank's part of the model.
  const PipelineSchedule* schedule() const { return schedule_.get(); }
  const GptStagePart& stage_part() const { return part_; }
  // The GPT's forward and backward on this rank (its activations, their offload, the tp traffic).
  GptModel& gpt() { return *gpt_; }
  // Collective: writes the weights under the spec's names as one F32 safetensors file. Each value is written once,
  // by the rank that owns it, at its place in the file (a shared file system): no rank gathers the model.
  void save(const std::string& path);
  // The final weights as a new Hugging Face model directory `dir` (models/hf/hf_directory_writer.h): config.json and
  // the model's tensors under Hugging Face's names, in shards of at most `max_shard_bytes`, and the `copy_in` files
  // (the tokenizer of the directory the run started from). Collective: save() into a temporary file beside `dir`,
  // which rank 0 turns into the directory and removes; an error on any rank fails every rank, and no `dir` is left.
  void save_hf(const std::string& dir, std::uint64_t max_shard_bytes, const std::vector<std::string>& copy_in);

 private:
  // Runs fn; an allocation over the device budget is rethrown with the planner's advice appended.
  template <typename Fn>
  void with_fit_advice(Fn&& fn);
  // The constructor's steps: the configuration's checks (before anything is allocated), a pipeline's schedule, the
  // parallelize step (the family's plan, gpt_parallelize.h: this rank's part, units, options and prefetch; then the
  // norm groups, counted mask, the tied pair, the sharded model and optimizer), and weights from --init.
  void check_config() const;
  // Global rows a step consumes: data-parallel ranks x --batch x --grad-accum (a pipeline splits --batch instead).
  std::uint64_t rows_per_step() const;
  // --recompute auto: the kind of each block, from 99% of the budget the rank with the least of it has left (every
  // rank makes the same choice); kOutOfMemory with the planner's cheapest change when nothing fits.
  void choose_recompute();
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
  // evaluate() under a pipeline: one micro-batch's forwards down the stages (no backward), run once per micro-batch.
  std::unique_ptr<PipelineSchedule> eval_schedule_;
  std::unique_ptr<PipelineExecutor> eval_executor_;
  std::unique_ptr<TiedParameters> tied_;  // pp > 1: wte on the first and last stage (the embeddings, the LM head)
  std::vector<std::int32_t> inputs_, targets_;  // this rank's tokens of a micro-batch's rows
  std::optional<ContextChunks> chunks_;           // --cp: which tokens of each row this rank holds
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
