// TrainConfig: the record a checkpoint keeps, the learning rate per step, and the checks of a run's layout.
#include "models/gpt/training/train_config.h"

#include "core/error.h"

namespace strata::gpt {

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json shape = {{"layers", model.layers}, {"heads", model.heads}, {"embd", model.embd},
                          {"vocab", model.vocab}, {"ctx", model.ctx}};
  if (model.llama()) {
    shape["family"] = family_name(model.family);
    shape["kv_heads"] = model.kv();
    shape["head_dim"] = model.hd();
    shape["ffn"] = model.mlp_width();
    shape["norm_eps"] = model.norm_eps;
    shape["rope_theta"] = model.rope_theta;
    const cpu::RopeScaling& r = model.rope_scaling;
    if (r.kind == cpu::RopeScaling::kLlama3)
      shape["rope_scaling"] = {{"rope_type", "llama3"},
                               {"factor", r.factor},
                               {"low_freq_factor", r.low_freq_factor},
                               {"high_freq_factor", r.high_freq_factor},
                               {"original_max_position_embeddings", r.original_max_position_embeddings}};
    else
      shape["rope_scaling"] = "none";
    shape["qkv_bias"] = model.qkv_bias;
    shape["tied"] = model.tied;
  }
  return {{"model", shape},
          {"seq", seq},
          {"batch", batch},
          {"grad_accum", grad_accum},
          {"adamw", {{"lr", adamw.lr}, {"beta1", adamw.beta1}, {"beta2", adamw.beta2}, {"eps", adamw.eps},
                     {"weight_decay", adamw.weight_decay}}},
          {"shuffle", shuffle},
          {"warmup_steps", warmup_steps},
          {"lr_schedule", lr_decay_name(lr_decay)},
          {"decay_steps", decay_steps},
          {"min_lr", lr_schedule().min_lr},
          {"decay_fraction", decay_fraction},
          {"zero_stage", static_cast<int>(sharding.stage)},
          {"param_dtype", dtype_name(sharding.mixed_precision.param_dtype)},
          {"compute_dtype", dtype_name(precision.matmul)},
          {"reduce_dtype", dtype_name(sharding.mixed_precision.reduce_dtype)},
          {"offload", offload_name(sharding.offload)},
          {"dp_replicate", dp_replicate},
          {"tp", tp},
          {"sequence_parallel", sequence_parallel},
          {"cp", cp},
          {"pp", pp},
          {"pp_schedule", pipeline_schedule_name(pp_schedule)},
          {"pp_virtual", pp_virtual},
          {"microbatches", micro_batches()},
          {"pp_keep_gathered", pp_keep_gathered},
          {"grad_clip", optimizer.grad_clip},
          {"recompute", recompute.flags(model.layers)},
          {"init", init},
          {"seed", seed}};
}

LrSchedule TrainConfig::lr_schedule() const {
  LrSchedule s;
  s.max_lr = adamw.lr;
  s.min_lr = min_lr >= 0 ? min_lr : adamw.lr / 10;
  s.warmup_steps = warmup_steps;
  s.total_steps = lr_decay == LrDecay::kConstant ? 0 : decay_steps;
  s.decay = lr_decay;
  s.decay_fraction = decay_fraction;
  return s;
}

void TrainConfig::validate(int world) const {
  model.validate();
  STRATA_CHECK(seq >= 1 && seq <= model.ctx, "--seq {} must be in [1, --ctx {}]", seq, model.ctx);
  STRATA_CHECK(tp >= 1 && world % tp == 0, "--tp {} does not divide the world size {}", tp, world);
  STRATA_CHECK(pp >= 1 && world % (tp * pp) == 0, "--pp {} x --tp {} does not divide the world size {}", pp, tp,
               world);
  validate_context(world);
  model.validate_tp(tp, sequence_parallel, seq);
  model.validate_sizes(batch, seq, tp);
  validate_pipeline();
  model.validate_sizes(micro_batch_rows(), seq, tp);
  recompute.validate(model.layers);
  STRATA_CHECK(!resume || !checkpoint.dir.empty(), "--resume needs --checkpoint-dir");
  STRATA_CHECK(checkpoint_every == 0 || !checkpoint.dir.empty(), "--checkpoint-every needs --checkpoint-dir");
}

void TrainConfig::validate_context(int world) const {
  STRATA_CHECK(cp >= 1, "--cp {} must be at least 1", cp);
  if (cp == 1) return;
  STRATA_CHECK(world % (cp * tp * pp) == 0, "--cp {} x --tp {} x --pp {} does not divide the world size {}", cp, tp,
               pp, world);
  STRATA_CHECK(seq % (2 * cp) == 0,
               "--seq {} must divide by 2 x --cp = {}: each rank holds two mirrored chunks of every row", seq, 2 * cp);
  // What the ring composes with so far; the rest is refused by name rather than run untested.
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, !sequence_parallel,
                    "--cp {} with --sequence-parallel: context parallelism does not compose with sequence parallelism "
                    "yet (--tp without it does)",
                    cp);
}

void TrainConfig::validate_pipeline() const {
  STRATA_CHECK(pp >= 1, "--pp {} must be at least 1", pp);
  STRATA_CHECK(microbatches >= 0, "--microbatches {} must be at least 1", microbatches);
  STRATA_CHECK(!pipelined() || grad_accum == 1,
               "--grad-accum {} with --microbatches {} (or --pp {}): use one of them (under a pipeline --batch is the "
               "step's rows per data-parallel rank, split into --microbatches)", grad_accum, micro_batches(), pp);
  STRATA_CHECK(pp_schedule != PipelineScheduleKind::kInterleaved || pp >= 2,
               "--pp-schedule interleaved needs --pp 2 or more (got --pp {})", pp);
  PipelineSchedule::check(pp_schedule, pp, micro_batches(), pp_virtual);
  check_layers(model.layers, pp, pp_virtual);
  micro_batch_size(batch, micro_batches());
}

}  // namespace strata::gpt
