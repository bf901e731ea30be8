// The MLP as one pipeline stage: this pp rank's layers (MlpLayers, over its tp group) behind the library's
// PipelineStage interface, so the PipelineExecutor runs any schedule over it. Micro-batch m of a step reads the rows
// begin_step's data(m) gives (the first stage its inputs, the last its targets: consecutive rows, or a cp rank's
// positions of its sequences). Stage boundaries carry [rows, hidden] activations: with tp > 1 a stage must end after a
// row-parallel layer (mlp_stage_layers checks).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <strata/strata.h>

#include "models/mlp/mlp.h"
#include "models/mlp/mlp_tensor_parallel.h"

namespace strata::mlp {

// The layers of pp rank `rank` of `pp` (split_layers); kInvalidArgument when a boundary would carry a tp-split
// activation (tp > 1 and a stage ends with a column-parallel layer) or a stage would be empty.
LayerRange mlp_stage_layers(const MlpConfig& cfg, int pp, int rank, int tp);

class MlpPipelineStage : public PipelineStage {
 public:
  // `model` holds this stage's layers as its units; rows per micro-batch; `slots` from the executor.
  // `keep`: recomputation and activation offload (mlp::Activations); offloaded, slot s's layers are the blocks from
  // s x layers.count() on (the offload holds slots x layers.count() blocks). `cp`: the attention's group when
  // cfg.seq > 1 (MlpLayers: this rank's rows are whole sequences of its chunks' positions).
  MlpPipelineStage(ShardedModel& model, TensorParallel& tp, const MlpConfig& cfg, LayerRange layers, int rows,
                   int slots, bool sync_every_micro_batch, const KeepOptions& keep = {}, Communicator* cp = nullptr);

  // `data(m)`: micro-batch m's rows (read by the first stage and the last).
  void begin_step(std::function<Batch(int micro_batch)> data, float grad_scale);
  // The sum of the micro-batches' losses this step (the last stage; 0 elsewhere).
  double loss_sum() const { return loss_sum_; }
  // The sequences' attention when this stage holds it (MlpLayers::attention), else null.
  const MlpAttention* attention() const { return layers_.attention(); }

  void forward(int micro_batch, int chunk, int slot) override;
  void backward(int micro_batch, int chunk, int slot) override;
  void* input(int slot) override { return in_[static_cast<std::size_t>(slot)].data(); }
  const void* output(int, int slot) override { return out_[static_cast<std::size_t>(slot)].data(); }
  void* grad_output() override { return grad_out_.data(); }
  const void* grad_input() override { return grad_in_.data(); }
  std::size_t boundary_count() const override { return boundary_; }
  DType boundary_dtype() const override { return DType::kF32; }
  void before_backward(int micro_batch, int chunk, bool last_of_chunk) override;

 private:
  ShardedModel& model_;
  const MlpConfig& cfg_;
  MlpLayers layers_;
  bool first_, last_, sync_every_;
  int rows_;
  std::size_t boundary_;
  std::function<Batch(int)> data_;
  float grad_scale_ = 1;
  double loss_sum_ = 0;
  std::vector<Activations> acts_;                  // per slot
  std::vector<std::vector<float>> in_, out_, dy_;  // per slot: the received input, the output, the loss gradient
  std::vector<float> grad_out_, grad_in_;
};

}  // namespace strata::mlp
