// ShardedAdamW: norm, skip, clip and the per-unit update through ShardedParameters' protocol.
#include "runtime/optim/sharded_adamw.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/logging.h"
#include "core/tracer.h"
#include "runtime/sharding/flat_ops.h"

namespace strata {

void OptimizerOptions::validate() const {
  STRATA_CHECK(!dynamic_loss_scale || initial_loss_scale > 0, "initial_loss_scale {} must be positive",
               initial_loss_scale);
  STRATA_CHECK(!dynamic_loss_scale || loss_scale_window > 0, "loss_scale_window {} must be positive",
               loss_scale_window);
  STRATA_CHECK(max_skipped_steps >= 0, "max_skipped_steps {} is negative (0: never stop)", max_skipped_steps);
}

namespace {

std::vector<Communicator*> norm_groups(ShardedParameters& params, const OptimizerOptions& o) {
  std::vector<Communicator*> groups = params.partition_groups();
  groups.insert(groups.end(), o.norm_groups.begin(), o.norm_groups.end());
  return groups;
}

}  // namespace

ShardedAdamW::ShardedAdamW(ShardedModel& model, const AdamWConfig& config, const OptimizerOptions& options)
    : params_(model.parameters()),
      config_(config),
      options_(options),
      scaler_(options.dynamic_loss_scale, options.initial_loss_scale, options.loss_scale_window) {
  config_.validate();
  options_.validate();
  Device& dev = params_.device();
  try {
    norm_ = std::make_unique<GradNorm>(params_, norm_groups(params_, options_), options_.counted,
                                       options_.counted_runs);
    std::size_t slots = 0;
    for (int u = 0; u < params_.num_units(); ++u) {
      slot_base_.push_back(slots);
      slots += params_.unit(u).layout->slots().size();
    }
    if (options_.check_updated_weights && slots > 0) flags_ = dev.allocate(slots * 4, MemCategory::kWorkspace);
    for (int u = 0; u < params_.num_units(); ++u) {
      const std::size_t bytes = params_.unit(u).numel() * 4;
      for (std::vector<Buffer>* state : {&exp_avg_, &exp_avg_sq_}) {
        state->push_back(dev.allocate(bytes, MemCategory::kOptimState));
        dev.fill_zero(state->back().data(), bytes, params_.stream());
      }
    }
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kOutOfMemory || model.resources().device().memory_budget() == 0) throw;
    throw Error(ErrorCode::kOutOfMemory,
                std::string(e.what()) + "\nmemory planner (Strata's own state): " +
                    model.resources().over_budget_advice(2));
  }
  kernel_ = create_adamw_kernel(dev);
  params_.stream().synchronize();
}

StepResult ShardedAdamW::step(double lr, std::int64_t step_label) {
  const std::int64_t label = step_label >= 0 ? step_label : calls_;
  ++calls_;
  params_.wait_for_grads();
  TraceSpan span("optimizer step", "optim", "compute");
  const NormResult norm = norm_->compute();
  const double inv_scale = 1.0 / scaler_.scale();
  StepResult r;
  r.grad_norm = std::sqrt(norm.sum_squares) * inv_scale;
  if (!norm.finite) {
    // Where, before the gradients go: the same place on every rank.
    const NonFiniteAt at = norm_->first_nonfinite();
    const bool backs_off = scaler_.enabled() && scaler_.scale() > 1.0f;
    params_.zero_grads();
    scaler_.update(true);
    if (skipped_run_++ == 0) {
      run_first_step_ = label;
      run_first_at_ = at;
    }
    if (!backs_off) ++skipped_at_floor_;
    r.skipped = true;
    r.step = step_;
    r.loss_scale = scaler_.scale();
    logger("optim").warn("step {} skipped on every rank: non-finite gradients (norm {}; the first: {}); loss scale "
                         "now {}",
                         label, r.grad_norm, describe_nonfinite(params_, at), r.loss_scale);
    params_.finish_step(step_, false);
    const int limit = options_.max_skipped_steps;
    const std::string floor =
        scaler_.enabled() ? fmt::format(", {} of them with the loss scale at its minimum 1", skipped_at_floor_) : "";
    STRATA_CHECK_CODE(ErrorCode::kNonFinite, limit == 0 || skipped_at_floor_ < limit,
                      "training stops at step {}: {} steps in a row skipped for non-finite gradients{} "
                      "(max_skipped_steps {}, 0: never stop). The first skipped step, {}, had its first non-finite "
                      "gradient in {} (the lowest place on any rank). Lower the learning rate, check the data and "
                      "the initial weights, or resume from an earlier checkpoint",
                      label, skipped_run_, floor, limit, run_first_step_, describe_nonfinite(params_, run_first_at_));
    return r;
  }
  skipped_run_ = 0;
  skipped_at_floor_ = 0;
  double coef = inv_scale;
  if (options_.grad_clip > 0) coef *= std::min(1.0, options_.grad_clip / (r.grad_norm + 1e-6));
  if (coef != 1.0)
    for (int u = 0; u < params_.num_units(); ++u) {
      const UnitShard shard = params_.unit(u);
      params_.ops().scale_f32(shard.grad, shard.numel(), static_cast<float>(coef), params_.stream());
    }
  ++step_;
  float* flags = flags_ ? flags_.as<float>() : nullptr;
  if (flags) params_.device().fill_zero(flags, flags_.bytes(), params_.stream());
  for (int u = 0; u < params_.num_units(); ++u) {
    params_.begin_update(u);
    const UnitShard shard = params_.unit(u);
    float* m = exp_avg_[static_cast<std::size_t>(u)].as<float>();
    float* v = exp_avg_sq_[static_cast<std::size_t>(u)].as<float>();
    for (const ShardSegment& seg : shard.segments) {
      const ParamSlot& slot = shard.layout->slots()[seg.slot];
      if (!slot.trainable) continue;
      const std::size_t o = seg.shard_begin;
      kernel_->update(shard.master + o, shard.grad + o, m + o, v + o, seg.length, config_, lr, step_,
                      slot.weight_decay, flags ? flags + slot_base_[static_cast<std::size_t>(u)] + seg.slot : nullptr,
                      params_.stream());
    }
    params_.end_update(u);
  }
  if (flags) check_updated(label, lr);
  scaler_.update(false);
  params_.finish_step(step_, true);
  r.step = step_;
  r.loss_scale = scaler_.scale();
  return r;
}

void ShardedAdamW::check_updated(std::int64_t label, double lr) {
  TraceSpan span("non-finite weight check", "optim", "compute");
  params_.stream().synchronize();
  std::vector<float> flags(flags_.bytes() / 4);
  params_.device().copy_to_host(flags.data(), flags_.data(), flags_.bytes());
  // The flags say which slots; a scan of the first flagged segment says which element.
  NonFiniteAt local;
  for (int u = 0; u < params_.num_units() && !local.found(); ++u) {
    const UnitShard shard = params_.unit(u);
    for (const ShardSegment& seg : shard.segments) {
      if (flags[slot_base_[static_cast<std::size_t>(u)] + seg.slot] == 0) continue;
      float value = 0;
      const std::size_t i = first_nonfinite(params_.device(), shard.master + seg.shard_begin, seg.length, &value);
      if (i == seg.length) continue;
      local = NonFiniteAt{u, static_cast<int>(seg.slot), seg.slot_begin + i, value};
      break;
    }
  }
  const NonFiniteAt at = norm_->agree(local);
  STRATA_CHECK_CODE(ErrorCode::kNonFinite, !at.found(),
                    "training stops at step {}: its AdamW update (lr {}) made a weight non-finite: {} (the lowest "
                    "place on any rank). Lower the learning rate or clip the gradients (grad_clip {}), or resume "
                    "from an earlier checkpoint",
                    label, lr, describe_nonfinite(params_, at), options_.grad_clip);
}

float* ShardedAdamW::exp_avg(int unit) { return exp_avg_.at(static_cast<std::size_t>(unit)).as<float>(); }
float* ShardedAdamW::exp_avg_sq(int unit) { return exp_avg_sq_.at(static_cast<std::size_t>(unit)).as<float>(); }

nlohmann::json ShardedAdamW::state() const {
  return {{"name", "adamw"},
          {"step", step_},
          {"loss_scale", scaler_.scale()},
          {"good_steps", scaler_.good_steps()},
          {"config",
           {{"lr", config_.lr},
            {"beta1", config_.beta1},
            {"beta2", config_.beta2},
            {"eps", config_.eps},
            {"weight_decay", config_.weight_decay}}}};
}

void ShardedAdamW::restore(const nlohmann::json& s) {
  STRATA_CHECK_CODE(ErrorCode::kIo,
                    s.is_object() && s.value("name", "") == "adamw" && s.contains("step") &&
                        s["step"].is_number_integer() && s["step"].get<std::int64_t>() >= 0 &&
                        s.contains("loss_scale") && s["loss_scale"].is_number() && s.contains("good_steps") &&
                        s["good_steps"].is_number_integer(),
                    "the checkpoint's optimizer state is not AdamW's: {}", s.dump());
  step_ = s["step"].get<std::int64_t>();
  scaler_.restore(s["loss_scale"].get<float>(), s["good_steps"].get<int>());
}

}  // namespace strata
