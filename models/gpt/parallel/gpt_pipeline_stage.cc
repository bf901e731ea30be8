// GptPipelineStage: data rows per micro-batch and the reduction protocol of a pipeline step.
#include "models/gpt/parallel/gpt_pipeline_stage.h"

#include <chrono>

namespace strata::gpt {

GptPipelineStage::GptPipelineStage(GptModel& gpt, ShardedModel& model, const TokenFile& data, int B, int T, int dp,
                                   int dp_rank, bool keep_gathered, std::optional<ContextChunks> chunks)
    : gpt_(gpt),
      model_(model),
      data_(data),
      B_(B),
      T_(T),
      dp_(dp),
      dp_rank_(dp_rank),
      keep_gathered_(keep_gathered),
      chunks_(chunks) {
  inputs_.resize(static_cast<std::size_t>(B) * static_cast<std::size_t>(chunks_ ? chunks_->local_rows() : T));
  targets_.resize(inputs_.size());
}

void GptPipelineStage::begin_step(std::uint64_t step_row, float grad_scale) {
  step_row_ = step_row;
  grad_scale_ = grad_scale;
  loss_sum_ = 0;
  data_ms_ = 0;
  // Reductions finish when the last unit's last backward ends (every forward of the step has its backward).
  model_.set_is_last_backward(true);
}

void GptPipelineStage::forward(int micro_batch, int chunk, int slot) {
  const std::uint64_t rows = static_cast<std::uint64_t>(B_);
  const std::uint64_t first = step_row_ + static_cast<std::uint64_t>(micro_batch) * static_cast<std::uint64_t>(dp_) *
                                              rows + static_cast<std::uint64_t>(dp_rank_) * rows;
  if (gpt_.chunk_reads_tokens(chunk)) {
    const auto t0 = std::chrono::steady_clock::now();
    if (chunks_)
      fill_chunk_rows(data_, first, B_, *chunks_, inputs_.data(), targets_.data());
    else
      fill_rows(data_, first, B_, T_, inputs_.data(), targets_.data());
    data_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  loss_sum_ += gpt_.forward_chunk(chunk, slot, inputs_.data(), targets_.data(), grad_scale_);
}

void GptPipelineStage::before_backward(int, int, bool last_of_chunk) {
  // Keeping gathered: gradients accumulate unsharded and are reduced once, by each unit's last backward, which also
  // frees its gathered parameters. Otherwise every micro-batch reduces and reshards (less memory, more traffic).
  model_.set_requires_gradient_sync(!keep_gathered_ || last_of_chunk);
  model_.set_reshard_after_backward(!keep_gathered_ || last_of_chunk);
}

void GptPipelineStage::backward(int, int chunk, int slot) { gpt_.backward_chunk(chunk, slot); }

void set_chunk_prefetch(ShardedModel& model, const GptStageUnits& units, int depth) {
  if (units.chunks() <= 1) return;
  for (int c = 0; c < units.chunks(); ++c) {
    const int first = units.first[static_cast<std::size_t>(c)], end = units.first[static_cast<std::size_t>(c) + 1];
    for (int i = first; i < end; ++i) {
      std::vector<int> ahead, behind;
      for (int k = 1; k <= depth; ++k) {
        if (i + k < end) ahead.push_back(i + k);
        if (i - k >= first) behind.push_back(i - k);
      }
      model.set_forward_prefetch(i, ahead);
      model.set_backward_prefetch(i, behind);
    }
  }
}

}  // namespace strata::gpt
