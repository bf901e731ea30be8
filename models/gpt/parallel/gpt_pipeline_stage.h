// GptPipelineStage: the GPT part of one pp rank as the PipelineExecutor sees it: each forward reads its micro-batch's
// rows of the data, each backward tells the ShardedModel whether to reduce and reshard (docs/pipeline-parallel.md).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "models/gpt/model/gpt_model.h"
#include "models/gpt/data/token_data.h"
#include "runtime/parallel/pipeline_executor.h"
#include "runtime/sharding/sharded_model.h"

namespace strata::gpt {

class GptPipelineStage : public PipelineStage {
 public:
  // B rows of T tokens per micro-batch on this rank; micro-batch a of a step reads the global rows
  // first_row(a) = step_row + a * dp * B + dp_rank * B (the window rule of GptTrainer). keep_gathered: reduce each
  // unit's gradients once per step, after its last backward, and keep ZeRO-3 parameters gathered until then.
  // Under context parallelism (`chunks`), T is the whole row's tokens and the model reads this rank's chunks of them.
  GptPipelineStage(GptModel& gpt, ShardedModel& model, const TokenFile& data, int B, int T, int dp, int dp_rank,
                   bool keep_gathered, std::optional<ContextChunks> chunks = std::nullopt);

  // Before a step: where its rows begin and the gradient scale of each micro-batch.
  void begin_step(std::uint64_t step_row, float grad_scale);
  // The sum of the micro-batches' mean losses this step (on the last stage; 0 elsewhere).
  double loss_sum() const { return loss_sum_; }
  // Milliseconds this step spent reading its rows' windows from the data.
  double data_ms() const { return data_ms_; }

  void forward(int micro_batch, int chunk, int slot) override;
  void backward(int micro_batch, int chunk, int slot) override;
  void* input(int slot) override { return gpt_.chunk_input(slot); }
  const void* output(int chunk, int slot) override { return gpt_.chunk_output(chunk, slot); }
  void* grad_output() override { return gpt_.grad_output(); }
  const void* grad_input() override { return gpt_.grad_input(); }
  std::size_t boundary_count() const override { return gpt_.boundary_floats(); }
  DType boundary_dtype() const override { return DType::kF32; }
  void before_backward(int micro_batch, int chunk, bool last_of_chunk) override;

 private:
  GptModel& gpt_;
  ShardedModel& model_;
  const TokenFile& data_;
  int B_, T_, dp_, dp_rank_;
  bool keep_gathered_;
  std::optional<ContextChunks> chunks_;  // --cp: inputs_ / targets_ hold this rank's chunks of each row
  std::uint64_t step_row_ = 0;
  float grad_scale_ = 1;
  double loss_sum_ = 0, data_ms_ = 0;
  std::vector<std::int32_t> inputs_, targets_;
};

// Prefetch within each chunk of a part of several chunks (interleaved): a unit's forward (backward) gathers the next
// (previous) `depth` units of its own chunk only, since the next chunk's units are needed only after other stages have
// run. A part of one chunk keeps ShardedModel's default lists.
void set_chunk_prefetch(ShardedModel& model, const GptStageUnits& units, int depth);

}  // namespace strata::gpt
