// GptTrainer: model construction, initialisation from a file or the spec's distributions, the step, saving.
#include "models/gpt/gpt_trainer.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "models/gpt/gpt_memory.h"
#include "models/gpt/kernels.h"
#include "models/gpt/safetensors.h"
#include "collectives/rank_values.h"
#include "core/error.h"

namespace strata::gpt {

double TrainConfig::lr_at(int step) const {
  if (warmup_steps == 0 && cosine_steps == 0) return adamw.lr;
  LrSchedule schedule{adamw.lr, cosine_steps > 0 ? adamw.lr / 10 : adamw.lr, warmup_steps, cosine_steps};
  return schedule.at(step);
}

template <typename Fn>
void GptTrainer::with_fit_advice(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    const std::uint64_t budget = rt_.device().memory_budget();
    if (e.code() != ErrorCode::kOutOfMemory || budget == 0) throw;
    // The prediction covers this trainer's memory: compare it with what the budget left it.
    const std::uint64_t left = budget > baseline_bytes_ ? budget - baseline_bytes_ : 0;
    throw Error(ErrorCode::kOutOfMemory,
                std::string(e.what()) + "\nmemory planner (this GPT, activations included): " +
                    fit_advice(cfg_, rt_.world_size(), left));
  }
}

GptTrainer::GptTrainer(Runtime& runtime, const TrainConfig& config, const TokenFile& data)
    : rt_(runtime), cfg_(config), data_(data), baseline_bytes_(runtime.device().memory_stats().current_total()) {
  cfg_.model.validate();
  STRATA_CHECK(cfg_.seq >= 1 && cfg_.seq <= cfg_.model.ctx, "sequence length {} must be in [1, ctx {}]", cfg_.seq,
               cfg_.model.ctx);
  STRATA_CHECK(data_.max_token() < cfg_.model.vocab, "data token {} is outside the vocabulary of {}", data_.max_token(),
               cfg_.model.vocab);
  // Kernel threads: the node's cores shared among its ranks (oversubscribed OpenMP threads spin against each other).
  set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / rt_.local_size()));
  mesh_ = std::make_unique<DeviceMesh>(rt_, MeshDims{1, cfg_.dp_replicate, -1, 1});
  with_fit_advice([&] {
    model_ = std::make_unique<ShardedModel>(*mesh_, gpt_units(cfg_.model), cfg_.sharding);
    optimizer_ = std::make_unique<ShardedAdamW>(*model_, cfg_.adamw, cfg_.optimizer);
  });
  for (int u = 0; u < model_->num_units(); ++u) parameters_ += model_->layout(u).numel();
  if (!cfg_.init.empty()) {
    SafetensorsReader reader(cfg_.init);
    for (int u = 0; u < model_->num_units(); ++u)
      for (const ParamSlot& s : model_->layout(u).slots()) reader.check_shape(s.name, s.shape);
    model_->init([&](const ParamSlot& s, std::size_t begin, std::size_t count, float* out) {
      reader.read_f32(s.name, begin, count, out);  // each rank reads only its shard
    });
  } else {
    const GptConfig m = cfg_.model;
    const std::uint64_t seed = cfg_.seed;
    model_->init([m, seed](const ParamSlot& s, std::size_t begin, std::size_t count, float* out) {
      spec_init(m, s, begin, count, out, seed);
    });
  }
  with_fit_advice([&] {
    gpt_ = std::make_unique<GptModel>(cfg_.model, *model_, rt_.device(), cfg_.batch, cfg_.seq, cfg_.recompute);
  });
  inputs_.resize(static_cast<std::size_t>(cfg_.batch) * cfg_.seq);
  targets_.resize(inputs_.size());
}

GptTrainer::~GptTrainer() = default;

StepRecord GptTrainer::step(int step) {
  auto t0 = std::chrono::steady_clock::now();
  const int world = rt_.world_size(), A = cfg_.grad_accum;
  double loss = 0;
  for (int a = 0; a < A; ++a) {
    model_->set_is_last_backward(a == A - 1);  // finish the reductions after the last micro-batch's backward
    fill_batch(data_, step, a, A, world, rt_.rank(), cfg_.batch, cfg_.seq, inputs_.data(), targets_.data());
    with_fit_advice([&] {
      loss +=
          gpt_->forward_backward(inputs_.data(), targets_.data(), optimizer_->loss_scale() / static_cast<float>(A)) / A;
    });
  }
  StepResult r = optimizer_->step(cfg_.lr_at(step));
  StepRecord rec;
  rec.step = step;
  rec.loss = sum_over_ranks(rt_.world(), loss) / world;
  rec.time_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  rec.grad_norm = r.grad_norm;
  rec.skipped = r.skipped;
  rec.loss_scale = r.loss_scale;
  return rec;
}

void GptTrainer::save(const std::string& path) {
  SafetensorsWriter writer;
  std::vector<std::vector<float>> keep;
  for (int u = 0; u < model_->num_units(); ++u) {
    keep.push_back(model_->gather_unit(u));  // collective
    for (const ParamSlot& s : model_->layout(u).slots())
      writer.add_f32(s.name, DType::kF32, s.shape, keep.back().data() + s.offset);
  }
  if (rt_.rank() == 0) writer.write(path, nlohmann::json{{"format", "pt"}, {"written_by", "strata train_gpt"}});
}

}  // namespace strata::gpt
