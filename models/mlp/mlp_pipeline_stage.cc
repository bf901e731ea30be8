// MlpPipelineStage: the MLP's layers of one pp rank, its data rows and its loss, for the PipelineExecutor.
#include "models/mlp/mlp_pipeline_stage.h"

#include <utility>

namespace strata::mlp {

LayerRange mlp_stage_layers(const MlpConfig& cfg, int pp, int rank, int tp) {
  check_layers(cfg.num_layers(), pp, 1);
  const LayerRange r = split_layers(cfg.num_layers(), pp, 1)[static_cast<std::size_t>(rank)];
  STRATA_CHECK(tp == 1 || r.last == cfg.num_layers() || layer_split(cfg, r.last - 1) != LayerSplit::kColumn,
               "--pp {} with --tp {}: stage {} would end with layer {}, which is column-parallel (its output is split "
               "over tp); choose --layers so that every stage ends after an odd layer", pp, tp, rank, r.last - 1);
  return r;
}

MlpPipelineStage::MlpPipelineStage(ShardedModel& model, TensorParallel& tp, const MlpConfig& cfg, LayerRange layers,
                                   int rows, int slots, bool sync_every_micro_batch, const KeepOptions& keep,
                                   Communicator* cp)
    : model_(model),
      cfg_(cfg),
      layers_(cfg, tp, layers.first, layers.last, cp, keep.dtype),
      first_(layers.first == 0),
      last_(layers.last == cfg.num_layers()),
      sync_every_(sync_every_micro_batch),
      rows_(rows),
      boundary_(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cfg.hidden)) {
  STRATA_CHECK(model.num_units() == layers.count(), "the model holds {} units; layers [{}, {}) are {}",
               model.num_units(), layers.first, layers.last, layers.count());
  for (int s = 0; s < slots; ++s) {
    KeepOptions slot_keep = keep;
    slot_keep.first_block = s * layers.count();
    acts_.emplace_back(model.resources().device(), slot_keep);
  }
  in_.assign(static_cast<std::size_t>(slots), std::vector<float>(boundary_));
  out_.assign(static_cast<std::size_t>(slots), {});
  dy_.assign(static_cast<std::size_t>(slots), {});
  grad_out_.resize(boundary_);
}

void MlpPipelineStage::begin_step(std::function<Batch(int)> data, float grad_scale) {
  data_ = std::move(data);
  grad_scale_ = grad_scale;
  loss_sum_ = 0;
  model_.set_is_last_backward(true);  // every forward of the step has its backward: reductions end with each
}

void MlpPipelineStage::forward(int micro_batch, int, int slot) {
  const std::size_t s = static_cast<std::size_t>(slot);
  Batch batch;
  if (first_ || last_) {
    batch = data_(micro_batch);
    STRATA_CHECK(batch.rows == rows_, "micro-batch {}: {} rows of data for a stage of {}", micro_batch, batch.rows,
                 rows_);
  }
  out_[s] = layers_.forward(model_, first_ ? batch.x : in_[s], acts_[s]);
  if (last_) loss_sum_ += mse_loss(out_[s], batch.t, dy_[s], grad_scale_);
}

void MlpPipelineStage::before_backward(int, int, bool last_of_chunk) {
  model_.set_requires_gradient_sync(sync_every_ || last_of_chunk);
}

void MlpPipelineStage::backward(int, int, int slot) {
  const std::size_t s = static_cast<std::size_t>(slot);
  grad_in_ = layers_.backward(model_, last_ ? dy_[s] : grad_out_, acts_[s]);
}

}  // namespace strata::mlp
