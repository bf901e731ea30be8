// custom_trainer: an MLP regression trained through Strata's embedding API under mpirun at any rank count, with
// Strata's ShardedAdamW or with a momentum SGD written here against the model's shard views (the optimizer is the
// trainer's choice), with --tp its layers split over a tensor-parallel group by the library's column- and
// row-parallel products (models/mlp/mlp_tensor_parallel.h), and with --pp its layers in pipeline stages run by the
// library's PipelineExecutor (models/mlp/mlp_pipeline_stage.h). Prints the loss per step and the memory ledger; can
// write the whole model's parameters (--params-out) or check them against such a file (--compare-params), and
// checkpoint the model with either optimizer's state through the library's Checkpointer (--checkpoint-dir, --resume
// at any layout). --recompute and --offload-activations change where its layers keep their activations,
// --activation-dtype bf16 keeps them in bf16, --seq makes its rows sequences mixed by an attention that --cp splits
// over a ring (models/mlp/mlp_attention.h), and --check-memory holds its memory to the library's prediction from what
// it declares. See docs/embedding.md.
#include <strata/flag_checks.h>  // CLI11 validators (installed; not in strata.h, which needs no CLI11)
#include <strata/strata.h>       // the public API, as an embedder outside this tree includes it

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <sstream>

#include "models/mlp/mlp.h"
#include "models/mlp/mlp_pipeline_stage.h"
#include "models/mlp/mlp_tensor_parallel.h"

namespace flags = strata::flags;

namespace {

// Momentum SGD as torch.optim.SGD computes it (dampening 0): d = g + wd * p (decayed slots), b = mu * b + d,
// p -= lr * b; with global-norm clipping first. It updates this rank's f32 shards through ShardedParameters: the
// runtime gathers, reduces and publishes; the arithmetic is this trainer's. The MLP runs on the CPU backend, where
// the shards are host memory, so plain loops do. As an OptimizerState it names its momentum buffer, one f32 per shard
// element, so the library's Checkpointer saves and loads it at any layout as it does AdamW's moments.
class MomentumSgd : public strata::OptimizerState {
 public:
  // The norm sums over the data-parallel groups and the mesh's tp group, each element of the whole model once.
  MomentumSgd(strata::ShardedModel& model, const strata::DeviceMesh& mesh, double momentum, double weight_decay,
              double clip)
      : params_(model.parameters()),
        momentum_(momentum),
        weight_decay_(weight_decay),
        clip_(clip),
        norm_(params_, norm_groups(params_, mesh), strata::counted_once(mesh)) {
    STRATA_CHECK_CODE(strata::ErrorCode::kUnsupported, params_.device().kind() == strata::DeviceKind::kCpu,
                      "this SGD updates host memory; its shards live on {}", params_.device().name());
    // The momentum buffer in the shards' memory and the ledger's optimizer category (one float per shard element).
    for (int u = 0; u < params_.num_units(); ++u) {
      const std::size_t bytes = params_.unit(u).numel() * sizeof(float);
      velocity_.push_back(params_.device().allocate(bytes, strata::MemCategory::kOptimState));
      if (bytes > 0) std::memset(velocity_.back().data(), 0, bytes);
    }
  }

  // Returns the global gradient norm (before clipping); NaN when the step was skipped (non-finite gradients).
  double step(double lr) {
    params_.wait_for_grads();
    const strata::NormResult n = norm_.compute();
    if (!n.finite) {
      params_.zero_grads();
      params_.finish_step(steps_, false);
      return std::nan("");
    }
    const double norm = std::sqrt(n.sum_squares);
    const float coef = clip_ > 0 ? static_cast<float>(std::min(1.0, clip_ / (norm + 1e-6))) : 1.0f;
    const float rate = static_cast<float>(lr), mu = static_cast<float>(momentum_);
    const float decay = static_cast<float>(weight_decay_);
    for (int u = 0; u < params_.num_units(); ++u) {
      params_.begin_update(u);
      params_.stream().synchronize();  // the shards' memory is ours to touch from the host now
      const strata::UnitShard shard = params_.unit(u);
      float* b = velocity_[static_cast<std::size_t>(u)].as<float>();
      for (const strata::ShardSegment& seg : shard.segments) {
        const strata::ParamSlot& slot = shard.layout->slots()[seg.slot];
        if (!slot.trainable) continue;
        const float wd = slot.weight_decay ? decay : 0.0f;
        for (std::size_t i = seg.shard_begin; i < seg.shard_begin + seg.length; ++i) {
          const float d = coef * shard.grad[i] + wd * shard.master[i];
          b[i] = mu * b[i] + d;
          shard.master[i] -= rate * b[i];
        }
      }
      params_.end_update(u);
    }
    params_.finish_step(++steps_, true);
    return norm;
  }

  std::string kind() const override { return "sgd"; }
  std::vector<std::string> tensor_names() const override { return {"momentum_buffer"}; }
  float* tensor_shard(std::size_t, int unit) override { return velocity_[static_cast<std::size_t>(unit)].as<float>(); }
  nlohmann::json state() const override {
    return {{"step", steps_}, {"config", {{"momentum", momentum_}, {"weight_decay", weight_decay_}}}};
  }
  void restore(const nlohmann::json& s) override {
    STRATA_CHECK_CODE(
        strata::ErrorCode::kIo,
        s.is_object() && s.contains("step") && s["step"].is_number_integer() && s["step"].get<std::int64_t>() >= 0,
        "the checkpoint's optimizer state is not this SGD's: {}", s.dump());
    steps_ = s["step"].get<std::int64_t>();
  }
  std::int64_t steps_taken() const override { return steps_; }

 private:
  static std::vector<strata::Communicator*> norm_groups(strata::ShardedParameters& p, const strata::DeviceMesh& mesh) {
    std::vector<strata::Communicator*> groups = p.partition_groups();
    for (strata::Communicator* g : strata::model_parallel_norm_groups(mesh)) groups.push_back(g);
    return groups;
  }

  strata::ShardedParameters& params_;
  double momentum_, weight_decay_;  // as given (the checkpoint records them); the update runs in f32
  double clip_;
  strata::GradNorm norm_;
  std::vector<strata::Buffer> velocity_;  // per unit, [shard_numel]
  std::int64_t steps_ = 0;
};

// The whole model's parameters as f32, on world rank 0 (empty elsewhere), in the order of `whole_units` (every
// layer, unsplit), each slot in its global shape: every rank places the slices of its units (a replicated slot: tp
// rank 0 only) and the tp and pp groups sum the parts. Collective. Runs a forward pass of the protocol.
std::vector<float> whole_parameters(strata::ShardedModel& model, const strata::DeviceMesh& mesh,
                                    const std::vector<strata::UnitSpec>& whole_units) {
  strata::Communicator& tp = mesh.tp();
  std::map<std::string, std::size_t> offset;  // slot name -> its first element in the whole model
  std::size_t total = 0;
  for (const strata::UnitSpec& u : whole_units)
    for (const strata::SlotSpec& s : u.slots) {
      offset[s.name] = total;
      total += strata::shape_numel(s.shape);
    }
  std::vector<float> all(total, 0.0f);
  for (int u = 0; u < model.num_units(); ++u) {
    for (const strata::TensorView& v : model.begin_forward(u)) {
      const strata::TpSplit& split = v.slot->tp;
      if (split.replicated() && tp.rank() != 0) continue;
      std::vector<float> local(v.numel());
      strata::convert(v.data, v.dtype, local.data(), strata::DType::kF32, v.numel());
      float* whole = all.data() + offset.at(v.slot->name);
      strata::for_each_global_run(
          split, tp.rank(), tp.size(), 0, local.size(),
          [&](std::size_t l, std::size_t g, std::size_t n) { std::copy_n(local.data() + l, n, whole + g); });
    }
    model.end_forward(u);
  }
  for (strata::Communicator* group : {&mesh.tp(), &mesh.pp()}) {
    group->all_reduce(all.data(), all.data(), all.size(), strata::DType::kF32, strata::ReduceOp::kSum,
                      mesh.device().compute_stream());
    mesh.device().compute_stream().synchronize();
  }
  if (mesh.world().rank() != 0) all.clear();
  return all;
}

// --compare-params: the largest difference from the values of `path` (one per line, as --params-out writes them);
// kInvalidArgument naming the first element over `tolerance`, or a count that differs.
void compare_parameters(const std::vector<float>& got, const std::string& path, double tolerance) {
  std::istringstream in(strata::read_input_file(path, "--compare-params"));
  std::vector<double> want;
  for (double x; in >> x;) want.push_back(x);
  STRATA_CHECK(want.size() == got.size(), "--compare-params {}: {} values; this model has {}", path, want.size(),
               got.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(got[i] - want[i]);
    STRATA_CHECK(d <= tolerance,
                 "--compare-params {}: parameter element {} is {:.9g}, the file's {:.9g} (difference "
                 "{:.3g} > {:.3g})",
                 path, i, got[i], want[i], d, tolerance);
    worst = std::max(worst, d);
  }
  std::printf("parameters: %zu values within %.3g of %s (largest difference %.3g)\n", got.size(), tolerance,
              path.c_str(), worst);
}

std::string parameters_text(const std::vector<float>& values) {
  std::string text;
  for (float v : values) text += fmt::format("{:.9g}\n", v);
  return text;
}

// One step's forwards and backwards over this rank's part of the model: a pipeline schedule under --pp (the
// library's executor over MlpPipelineStage), else the micro-batches in turn, over the tp group when one splits the
// layers.
class StepRunner {
 public:
  StepRunner(strata::ShardedModel& model, const strata::DeviceMesh& mesh, const strata::mlp::MlpConfig& cfg,
             strata::LayerRange layers, int rows, int micro_batches, const std::string& pp_schedule,
             bool sync_every_micro_batch, std::uint64_t seed, bool recompute, bool offload, strata::DType activations)
      : model_(model),
        cfg_(cfg),
        chunks_(strata::ContextChunks::of(cfg.seq > 1 ? cfg.seq : 2 * mesh.cp().size(), mesh.cp().size(),
                                          mesh.cp().rank())),
        rows_(rows),
        micro_batches_(micro_batches),
        sync_every_(sync_every_micro_batch),
        pp_rank_(mesh.pp().rank()),
        seed_(seed),
        tp_(mesh.device(), &mesh.tp(), false, rows, 1, cfg.hidden) {
    keep_.recompute = recompute;
    keep_.dtype = activations;
    if (mesh.pp().size() > 1) {
      schedule_ = std::make_unique<strata::PipelineSchedule>(strata::PipelineSchedule::build(
          strata::parse_pipeline_schedule(pp_schedule), mesh.pp().size(), micro_batches));
      schedule_->validate();
      executor_ = std::make_unique<strata::PipelineExecutor>(*schedule_, mesh.pp());
    }
    // Activation offload: a block per layer per micro-batch in flight, in host memory between forward and backward.
    if (offload) {
      offload_ = std::make_unique<strata::ActivationOffload>(
          mesh.device(),
          strata::mlp::offloaded_activation_bytes(cfg, layers.first, layers.last, rows, mesh.tp().size(), recompute,
                                                  strata::dtype_size(activations)),
          in_flight() * layers.count());
      keep_.offload = offload_.get();
    }
    if (executor_)
      stage_ = std::make_unique<strata::mlp::MlpPipelineStage>(model, tp_, cfg, layers, rows, executor_->slots(),
                                                               sync_every_micro_batch, keep_, &mesh.cp());
    else if (mesh.tp().size() > 1 || activations != strata::DType::kF32 || cfg.seq > 1)  // else mlp::forward_backward
      layers_ = std::make_unique<strata::mlp::MlpLayers>(cfg, tp_, 0, cfg.num_layers(), &mesh.cp(), activations);
  }

  // The sequences' attention (null without --seq): its ring's buffers, for the declaration.
  const strata::mlp::MlpAttention* attention() const {
    if (stage_) return stage_->attention();
    return layers_ ? layers_->attention() : nullptr;
  }

  // The pool slots this rank's step holds at once (StepDeclaration::held): the library's rehearsal of its unit calls
  // (its pipeline schedule, or its micro-batches with or without gradient sync between them).
  strata::PoolPeaks held_pool_slots(const std::vector<strata::UnitSpec>& units,
                                    const strata::ShardingOptions& opts) const {
    strata::UnitProtocol protocol;
    protocol.micro_batches = micro_batches_;
    protocol.sync_every_micro_batch = sync_every_;
    return strata::rehearse_unit_protocol(units, opts, protocol, schedule_.get(), pp_rank_);
  }

  // Micro-batches whose activations this rank keeps at once: a pipeline stage's slots, else one.
  int in_flight() const { return executor_ ? executor_->slots() : 1; }
  // The activation offload (null without --offload-activations).
  const strata::ActivationOffload* offload() const { return offload_.get(); }

  // This rank's loss: the mean over its rows and the micro-batches (0 on a pipeline's stages but the last).
  double run(const std::function<std::uint64_t(int)>& first_row, float grad_scale) {
    if (stage_) {
      stage_->begin_step([&](int m) { return batch(first_row(m)); }, grad_scale);
      executor_->run_step(*stage_);
      return stage_->loss_sum() / micro_batches_;
    }
    double loss = 0;
    for (int a = 0; a < micro_batches_; ++a) {
      const bool last = a == micro_batches_ - 1;
      model_.set_requires_gradient_sync(sync_every_ || last);
      model_.set_is_last_backward(last);
      const strata::mlp::Batch data = batch(first_row(a));
      if (!layers_) {
        loss += strata::mlp::forward_backward(model_, cfg_, data, grad_scale, keep_) / micro_batches_;
        continue;
      }
      strata::mlp::Activations acts(model_.resources().device(), keep_);
      std::vector<float> dy;
      loss += strata::mlp::mse_loss(layers_->forward(model_, data.x, acts), data.t, dy, grad_scale) / micro_batches_;
      layers_->backward(model_, std::move(dy), acts);
    }
    return loss;
  }

 private:
  // This rank's rows of the data rows from `first`: all of them, or under cp its chunks' positions of each sequence.
  strata::mlp::Batch batch(std::uint64_t first) const {
    if (chunks_.cp == 1) return strata::mlp::make_batch(cfg_, first, rows_, seed_);
    std::vector<std::uint64_t> ids;
    for (int b = 0; b < rows_ / chunks_.local_rows(); ++b)
      for (int i = 0; i < chunks_.local_rows(); ++i)
        ids.push_back(first + static_cast<std::uint64_t>(b) * static_cast<std::uint64_t>(cfg_.seq) +
                      static_cast<std::uint64_t>(chunks_.position(i)));
    return strata::mlp::make_rows(cfg_, ids, seed_);
  }

  strata::ShardedModel& model_;
  const strata::mlp::MlpConfig& cfg_;
  strata::ContextChunks chunks_;
  int rows_, micro_batches_;
  bool sync_every_;
  int pp_rank_;
  std::uint64_t seed_;
  strata::TensorParallel tp_;
  std::unique_ptr<strata::PipelineSchedule> schedule_;
  std::unique_ptr<strata::PipelineExecutor> executor_;
  std::unique_ptr<strata::ActivationOffload> offload_;
  strata::mlp::KeepOptions keep_;
  std::unique_ptr<strata::mlp::MlpPipelineStage> stage_;
  std::unique_ptr<strata::mlp::MlpLayers> layers_;  // without pp, through MlpLayers
};

// Strata's AdamW over the whole model: the norm over the tp and pp groups too, each element counted once.
std::unique_ptr<strata::ShardedAdamW> make_adamw(strata::ShardedModel& model, const strata::DeviceMesh& mesh, double lr,
                                                 double weight_decay, double clip, strata::DType param_dtype) {
  strata::AdamWConfig config;
  config.lr = lr;
  config.weight_decay = weight_decay;
  strata::OptimizerOptions o;
  o.grad_clip = clip;
  o.dynamic_loss_scale = param_dtype == strata::DType::kF16;
  o.norm_groups = strata::model_parallel_norm_groups(mesh);
  o.counted = strata::counted_once(mesh);
  return std::make_unique<strata::ShardedAdamW>(model, config, o);
}

// What this rank's step holds, declared to the library's prediction (runtime/memory/step_memory.h): Strata's state
// follows from the units, the sharding options, the data-parallel groups and the optimizer (AdamW: two floats per
// element and its non-finite flags; the SGD above: its momentum buffer); the trainer's own buffers are the
// activations its layers keep per micro-batch (mlp::kept_activation_bytes), for the micro-batches in flight (with
// activation offload: their host sets, a block per layer and micro-batch in flight, and the two device staging sets
// of one block each), and the MPI backend's staging of its own collectives: under tp the products' all-reduces (a
// column-parallel layer's input gradient [rows, in], a row-parallel layer's output [rows, out]) on the compute stream
// and the gradient norm's sum (two doubles) on the optimizer's; under pp the norm's sum over the stages.
strata::StepDeclaration declare_step(const std::vector<strata::UnitSpec>& units, const strata::ShardingOptions& opts,
                                     const strata::DeviceMesh& mesh, const strata::mlp::MlpConfig& cfg,
                                     strata::LayerRange layers, int rows, int in_flight, bool adamw, bool recompute,
                                     bool offload, strata::DType activations,
                                     const strata::mlp::MlpAttention* attention) {
  strata::StepDeclaration d;
  d.units = units;
  d.sharding = opts;
  d.groups = strata::DataParallelSizes{mesh.dp_shard_cp().size(), mesh.dp_replicate().size()};  // cp ranks shard too
  d.optimizer_floats = adamw ? 2 : 1;
  d.optimizer_flags = adamw;
  const int tp = mesh.tp().size(), pp = mesh.pp().size();
  const std::size_t element = strata::dtype_size(activations);  // bf16 activations: 2 bytes each
  const char* kept = recompute ? "the layers' inputs" : "the layers' inputs and outputs";
  if (offload) {
    std::uint64_t block = 0;
    for (std::size_t bytes :
         strata::mlp::offloaded_activation_bytes(cfg, layers.first, layers.last, rows, tp, recompute, element))
      block += bytes;
    d.add_host(fmt::format("offload: {}, a block per layer and micro-batch in flight", kept),
               strata::MemCategory::kActivations,
               static_cast<std::uint64_t>(in_flight) * static_cast<std::uint64_t>(layers.count()) * block);
    d.add("offload: its two staging sets of one block", strata::MemCategory::kWorkspace, 2 * block);
  } else {
    d.add(fmt::format("{}, per micro-batch in flight", kept), strata::MemCategory::kActivations,
          static_cast<std::uint64_t>(in_flight) *
              strata::mlp::kept_activation_bytes(cfg, layers.first, layers.last, rows, tp, recompute, element));
  }
  if (recompute)
    d.add("the output a backward rebuilds (one layer's at a time)", strata::MemCategory::kActivations,
          strata::mlp::rebuilt_activation_bytes(cfg, layers.first, layers.last, rows, tp, element));
  if (tp > 1) {
    d.add("tp: the products' all-reduces (compute stream)", strata::MemCategory::kCommBuffer,
          strata::all_reduce_staging(strata::mlp::largest_tp_all_reduce(cfg, layers.first, layers.last, rows), tp,
                                     element));
    d.add("tp: the gradient norm's sum", strata::MemCategory::kCommBuffer, strata::all_reduce_staging(2, tp, 8));
  }
  if (pp > 1)
    d.add("pp: the gradient norm's sum", strata::MemCategory::kCommBuffer, strata::all_reduce_staging(2, pp, 8));
  if (attention) {  // --seq: what the attention keeps per micro-batch in flight, and its ring's buffers
    d.add("the attention's input, output and log-sum-exp, per micro-batch in flight", strata::MemCategory::kActivations,
          static_cast<std::uint64_t>(in_flight) * attention->kept_bytes());
    d.add("cp: the ring's key / value blocks and their gradients", strata::MemCategory::kCommBuffer,
          attention->comm_buffer_bytes());
    d.add(activations == strata::DType::kBF16
              ? "cp: the ring's block output, row statistics and f32 accumulator of the output rows"
              : "cp: the ring's block output and row statistics",
          strata::MemCategory::kWorkspace, attention->workspace_bytes());
  }
  return d;
}

// --check-memory: this rank's peak per ledger category over the steps, above `before` (the ledger's bytes before the
// model was built), against the declaration's prediction, on the device and (with activation offload, whose host sets
// are a ledger of their own) on the host; rank 0 prints both, and any category that differs on any rank is an error
// naming it, where and the rank. The checkpointer's staging is its own (not a step's) and is left out. Collective.
void check_memory(strata::Runtime& rt, const strata::StepDeclaration& d, const strata::CategoryBytes& before,
                  const strata::ActivationOffload* offload) {
  std::string problem;
  auto compare = [&](const char* where, const strata::CategoryBytes& predicted, const strata::MemoryStats& stats,
                     const strata::CategoryBytes& from) {
    if (rt.rank() == 0)
      std::printf("memory (%s): predicted from the declaration and measured, rank 0 (bytes):\n", where);
    for (std::size_t i = 0; i < strata::kNumMemCategories; ++i) {
      const auto c = static_cast<strata::MemCategory>(i);
      const std::uint64_t measured = stats.peak(c) - from[i];
      if (c != strata::MemCategory::kCheckpoint && measured != predicted[i] && problem.empty())
        problem =
            fmt::format("--check-memory: rank {}: {} on the {} predicted {} bytes, measured {}\n{}", rt.rank(),
                        strata::mem_category_name(c), where, predicted[i], measured, strata::declaration_table(d));
      if (rt.rank() == 0 && (predicted[i] != 0 || measured != 0))
        std::printf("  %-18s %12llu %12llu\n", strata::mem_category_name(c),
                    static_cast<unsigned long long>(predicted[i]), static_cast<unsigned long long>(measured));
    }
  };
  compare("device", strata::predict_step_memory(d), rt.device().memory_stats(), before);
  if (offload) compare("host", strata::predict_step_host_memory(d), offload->host().memory_stats(), {});
  strata::all_agree(rt.world(), problem.empty(), problem, "--check-memory");
  if (rt.rank() == 0) std::printf("memory: every category as predicted on every rank\n");
}

// The output files checked (and created) on rank 0 and the input file opened, before the first step; every rank
// stops with rank 0's error.
void check_files(strata::Runtime& rt, const std::string& ledger_json, const std::string& params_out,
                 const std::string& compare_params, const std::string& declaration_out) {
  std::string problem;
  if (rt.rank() == 0) {
    try {
      if (!ledger_json.empty()) strata::check_output_file(ledger_json, "--ledger-json", strata::OutputKind::kDirect);
      if (!declaration_out.empty())
        strata::check_output_file(declaration_out, "--declaration-out", strata::OutputKind::kDirect);
      if (!params_out.empty()) strata::check_output_file(params_out, "--params-out", strata::OutputKind::kDirect);
      if (!compare_params.empty()) strata::check_input_file(compare_params, "--compare-params");
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  strata::all_agree(rt.world(), problem.empty(), problem, "checking the output and input files");
}

// --params-out and --compare-params after the last step (collective; rank 0 writes and compares).
void finish_parameters(strata::Runtime& rt, strata::ShardedModel& model, const strata::DeviceMesh& mesh,
                       const strata::mlp::MlpConfig& cfg, const std::string& params_out,
                       const std::string& compare_params, double tolerance) {
  if (params_out.empty() && compare_params.empty()) return;
  const std::vector<float> whole = whole_parameters(model, mesh, strata::mlp::mlp_units(cfg));
  std::string mismatch;
  if (rt.rank() == 0) {
    try {
      if (!params_out.empty()) strata::write_output_file(params_out, "--params-out", parameters_text(whole));
      if (!compare_params.empty()) compare_parameters(whole, compare_params, tolerance);
    } catch (const std::exception& e) {
      mismatch = e.what();
    }
  }
  strata::all_agree(rt.world(), mismatch.empty(), mismatch, "writing or comparing the parameters");
}

// --declaration-out: rank 0's declaration as JSON (collective: every rank stops with rank 0's error).
void write_declaration(strata::Runtime& rt, const std::string& path, const strata::StepDeclaration& d) {
  std::string problem;
  if (rt.rank() == 0) {
    try {
      strata::write_output_file(path, "--declaration-out", strata::step_declaration_json(d));
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  strata::all_agree(rt.world(), problem.empty(), problem, "writing the step declaration");
}

// What this trainer stores beside a checkpoint (the library keeps it as JSON): where its data stands and what shaped
// it, so a resume continues with the next rows.
nlohmann::json trainer_state(int next_step, int batch, int micro_batches) {
  return {{"program", "custom_trainer"}, {"next_step", next_step}, {"batch", batch}, {"micro_batches", micro_batches}};
}

// --resume: loads the latest checkpoint (model, optimizer state, at any layout; the library refuses another model or
// another optimizer's state, naming both) and returns the step to go on from. Collective.
int resume(strata::Checkpointer& checkpointer, const std::string& dir, int batch, int micro_batches) {
  const nlohmann::json t = checkpointer.load();
  const std::string where = fmt::format("--resume: {} (step {})", dir, checkpointer.last_load().step);
  STRATA_CHECK(t.value("program", "") == "custom_trainer" && t.contains("next_step") &&
                   t["next_step"].is_number_integer() && t.contains("batch") && t.contains("micro_batches"),
               "{}: its trainer state is not custom_trainer's: {}", where, t.dump());
  STRATA_CHECK(t["batch"] == batch && t["micro_batches"] == micro_batches,
               "{}: it trained --batch {} rows in --grad-accum {} micro-batches a step, this run --batch {} in {}: "
               "its data position would not continue here",
               where, t["batch"].dump(), t["micro_batches"].dump(), batch, micro_batches);
  return t["next_step"].get<int>();
}

// The command line.
struct Flags {
  int zero_stage = 3, steps = 20, batch = 24, micro_batches = 1, dp_replicate = 1, tp_degree = 1, pp_degree = 1;
  int cp_degree = 1, seq = 1;
  int hidden = 64, hidden_layers = 3;
  std::string param_dtype = "f32", reduce_dtype = "f32", activation_dtype = "f32", accumulation = "reduce", ledger_json,
              optimizer = "adamw";
  std::string params_out, compare_params, pp_schedule = "1f1b", checkpoint_dir, declaration_out;
  double lr = 1e-2, weight_decay = 0.01, grad_clip = 1.0, momentum = 0.9, params_tolerance = 1e-5;
  std::uint64_t seed = 1;
  int checkpoint_every = 0, stop_at = 0;
  bool keep_params = false, resume = false, check_memory = false, recompute = false, offload_activations = false;
};

void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--zero-stage", f.zero_stage, "0 (DDP), 1, 2 or 3 (full shard)")->check(flags::integer(0, 3));
  app.add_option("--steps", f.steps, "optimizer steps")->check(flags::positive_integer());
  app.add_option("--param-dtype", f.param_dtype, "f32, bf16 or f16")->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_option("--reduce-dtype", f.reduce_dtype, "f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--activation-dtype", f.activation_dtype,
                 "f32 or bf16: the layers' activations, kept and passed between them (through the library's bf16 "
                 "column- and row-parallel products: the tp collectives in bf16), the products summed in f32")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--batch", f.batch, "rows per micro-batch over all ranks (each rank takes batch / ranks)")
      ->check(flags::positive_integer());
  app.add_option("--grad-accum,--microbatches", f.micro_batches,
                 "micro-batches per step (under --pp, the pipeline's micro-batches)")
      ->check(flags::positive_integer());
  app.add_option("--accumulation", f.accumulation, "reduce (every micro-batch) or no-sync (only the last)")
      ->check(CLI::IsMember({"reduce", "no-sync"}));
  app.add_option("--dp-replicate", f.dp_replicate,
                 "hybrid sharding: replicate the state across this many groups, each sharding it over ranks / "
                 "dp-replicate ranks")
      ->check(flags::positive_integer());
  app.add_option("--tp", f.tp_degree,
                 "tensor parallelism: split the layers over groups of this many ranks (Megatron's column / row "
                 "pairs); the data-parallel ranks are ranks / tp")
      ->check(flags::positive_integer());
  app.add_option("--pp", f.pp_degree, "pipeline parallelism: consecutive layers in this many stages")
      ->check(flags::positive_integer());
  app.add_option("--seq", f.seq,
                 "rows are sequences of this many positions, mixed by a causal self-attention after layer 1 (1: "
                 "independent rows, no attention)")
      ->check(flags::positive_integer());
  app.add_option("--cp", f.cp_degree,
                 "context parallelism: each sequence split over this many ranks in mirrored chunks, its attention a "
                 "ring (the library's RingAttention); needs --seq a multiple of 2 x cp")
      ->check(flags::positive_integer());
  app.add_option("--pp-schedule", f.pp_schedule, "gpipe or 1f1b")->check(CLI::IsMember({"gpipe", "1f1b"}));
  app.add_option("--params-out", f.params_out, "write the whole model's parameters at the end (one value a line)");
  app.add_option("--compare-params", f.compare_params,
                 "at the end, check the whole model's parameters against a --params-out file (fails over "
                 "--params-tolerance)");
  app.add_option("--params-tolerance", f.params_tolerance, "largest absolute difference --compare-params accepts")
      ->check(flags::non_negative_real());
  app.add_option("--optimizer", f.optimizer, "adamw (Strata's ShardedAdamW) or sgd (momentum SGD written here)")
      ->check(CLI::IsMember({"adamw", "sgd"}));
  app.add_option("--momentum", f.momentum, "SGD momentum")->check(flags::real(0.0, false, 1.0, false));
  app.add_option("--hidden", f.hidden, "hidden width")->check(flags::positive_integer());
  app.add_option("--layers", f.hidden_layers, "hidden layers")->check(flags::positive_integer());
  app.add_option("--lr", f.lr, "learning rate")->check(flags::non_negative_real());
  app.add_option("--weight-decay", f.weight_decay, "weight decay (decoupled for AdamW, added to the gradient for SGD)")
      ->check(flags::non_negative_real());
  app.add_option("--grad-clip", f.grad_clip, "global gradient-norm clip (0: off)")->check(flags::non_negative_real());
  app.add_option("--seed", f.seed, "init and data seed")->check(flags::unsigned_integer());
  app.add_flag("--no-reshard-after-forward", f.keep_params, "ZeRO-3: keep gathered parameters for backward");
  app.add_option("--ledger-json", f.ledger_json, "write the memory ledger of every rank as JSON");
  app.add_option("--checkpoint-dir", f.checkpoint_dir,
                 "sharded checkpoints of the model, the optimizer's state (either optimizer) and this trainer's "
                 "position here: one after the last step, and with --checkpoint-every")
      ->check(flags::path_name());
  app.add_option("--checkpoint-every", f.checkpoint_every, "also checkpoint every N steps")
      ->check(flags::non_negative_integer());
  app.add_option("--stop-at", f.stop_at, "stop (and checkpoint) after this many steps of --steps; --resume continues")
      ->check(flags::non_negative_integer());
  app.add_flag("--recompute", f.recompute,
               "keep each layer's input alone and rebuild its output in the backward (RecomputePolicy's full kind "
               "for every layer): the same results bit for bit, less activation memory");
  app.add_flag("--offload-activations", f.offload_activations,
               "keep what the layers keep for their backward in host memory between the forward and the backward "
               "(the library's ActivationOffload; with --recompute, the inputs alone): the same results bit for bit, "
               "two layers' worth on the device");
  app.add_flag("--check-memory", f.check_memory,
               "after the last step, hold every category of each rank's memory ledger to the library's prediction "
               "from this trainer's declaration (an error naming the category and the rank when one differs)");
  app.add_option("--declaration-out", f.declaration_out,
                 "write rank 0's step declaration (its units, sharding, optimizer and buffers) as JSON, for "
                 "strata-plan --declaration");
  app.add_flag("--resume", f.resume,
               "continue from the latest checkpoint in --checkpoint-dir, at any layout (without one, start fresh)");
}

// The configuration every rank must run (strata::check_config_agreement).
std::vector<strata::ConfigField> configuration(const Flags& f) {
  auto v = [](auto x) { return fmt::format("{}", x); };
  return {{"program", "custom_trainer"},
          {"--zero-stage", v(f.zero_stage)},
          {"--steps", v(f.steps)},
          {"--param-dtype", f.param_dtype},
          {"--reduce-dtype", f.reduce_dtype},
          {"--activation-dtype", f.activation_dtype},
          {"--batch", v(f.batch)},
          {"--grad-accum", v(f.micro_batches)},
          {"--accumulation", f.accumulation},
          {"--dp-replicate", v(f.dp_replicate)},
          {"--tp", v(f.tp_degree)},
          {"--pp", v(f.pp_degree)},
          {"--pp-schedule", f.pp_schedule},
          {"--seq", v(f.seq)},
          {"--cp", v(f.cp_degree)},
          {"--params-out", f.params_out},
          {"--compare-params", f.compare_params},
          {"--params-tolerance", v(f.params_tolerance)},
          {"--optimizer", f.optimizer},
          {"--momentum", v(f.momentum)},
          {"--hidden", v(f.hidden)},
          {"--layers", v(f.hidden_layers)},
          {"--lr", v(f.lr)},
          {"--weight-decay", v(f.weight_decay)},
          {"--grad-clip", v(f.grad_clip)},
          {"--seed", v(f.seed)},
          {"--no-reshard-after-forward", v(f.keep_params)},
          {"--ledger-json", f.ledger_json},
          {"--checkpoint-dir", f.checkpoint_dir},
          {"--checkpoint-every", v(f.checkpoint_every)},
          {"--stop-at", v(f.stop_at)},
          {"--resume", v(f.resume)},
          {"--check-memory", v(f.check_memory)},
          {"--recompute", v(f.recompute)},
          {"--offload-activations", v(f.offload_activations)},
          {"--declaration-out", f.declaration_out}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a small MLP regression with Strata's sharding runtime"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // later flags override
  Flags flags;
  add_flags(app, flags);
  CLI11_PARSE(app, argc, argv);

  return strata::run_main([&] {
    strata::Runtime rt(&argc, &argv);
    strata::check_config_agreement(configuration(flags));  // every rank must run this configuration
    const Flags& f = flags;
    const int world = rt.world_size();
    check_files(rt, f.ledger_json, f.params_out, f.compare_params, f.declaration_out);
    STRATA_CHECK(world % (f.tp_degree * f.pp_degree * f.cp_degree) == 0,
                 "--tp {} x --pp {} x --cp {} must divide the {} ranks", f.tp_degree, f.pp_degree, f.cp_degree, world);
    const int dp = world / (f.tp_degree * f.pp_degree * f.cp_degree);
    STRATA_CHECK(f.batch % dp == 0, "--batch {} rows must divide among the {} data-parallel ranks", f.batch, dp);
    const int dp_rows = f.batch / dp;  // a data-parallel rank's rows (its sequences whole)
    STRATA_CHECK(f.seq == 1 || dp_rows % f.seq == 0,
                 "--seq {}: a data-parallel rank's {} rows (--batch {} / {}) must be whole sequences", f.seq, dp_rows,
                 f.batch, dp);
    STRATA_CHECK(f.cp_degree == 1 || (f.seq > 1 && f.seq % (2 * f.cp_degree) == 0),
                 "--cp {} splits each sequence in 2 x cp chunks: give --seq a multiple of {}", f.cp_degree,
                 2 * f.cp_degree);
    const int rows = dp_rows / f.cp_degree;  // this rank's: under cp, its chunks of each sequence
    strata::mlp::MlpConfig cfg;
    cfg.in = 16;
    cfg.hidden = f.hidden;
    cfg.out = 4;
    cfg.hidden_layers = f.hidden_layers;
    cfg.seq = f.seq;
    cfg.validate_sizes(rows);  // before any allocation: --hidden and --layers multiply
    // The data rows a run draws: the row index of the last one must not wrap around.
    strata::checked_product("rows drawn (--steps x --grad-accum x --batch)", f.steps, f.micro_batches, f.batch);

    strata::ShardingOptions opts;
    opts.stage = strata::zero_stage_from_int(f.zero_stage);
    opts.mixed_precision.param_dtype = strata::parse_dtype(f.param_dtype);
    opts.mixed_precision.reduce_dtype = strata::parse_dtype(f.reduce_dtype);
    opts.reshard_after_forward = !f.keep_params;
    STRATA_CHECK(f.optimizer == "adamw" || opts.mixed_precision.param_dtype != strata::DType::kF16,
                 "--optimizer sgd has no loss scaling: use --param-dtype f32 or bf16");

    // Stages of pp ranks hold consecutive layers, groups of tp ranks split each layer; the rest is data-parallel:
    // dp_replicate groups, each sharding the state over dp / dp_replicate ranks.
    strata::DeviceMesh mesh(rt, strata::MeshDims{f.pp_degree, f.dp_replicate, -1, f.tp_degree, f.cp_degree});
    const std::vector<strata::UnitSpec> all_units =
        f.tp_degree > 1 ? strata::mlp::mlp_units_tp(cfg, f.tp_degree) : strata::mlp::mlp_units(cfg);
    const strata::LayerRange layers = strata::mlp::mlp_stage_layers(cfg, f.pp_degree, mesh.pp().rank(), f.tp_degree);
    const std::vector<strata::UnitSpec> units(all_units.begin() + layers.first, all_units.begin() + layers.last);
    strata::CategoryBytes before{};  // the ledger before the model: what --check-memory measures from
    for (std::size_t i = 0; i < strata::kNumMemCategories; ++i)
      before[i] = rt.device().memory_stats().current(static_cast<strata::MemCategory>(i));
    strata::ShardedModel model(mesh, units, opts);
    if (f.tp_degree > 1 || f.pp_degree > 1) {
      model.init(strata::mlp::mlp_init_tp(mesh, f.seed));
    } else {
      model.init([&](const strata::ParamSlot& s, std::size_t begin, std::size_t count, float* out) {
        strata::mlp::mlp_init(s, begin, count, out, f.seed);
      });
    }
    StepRunner runner(model, mesh, cfg, layers, rows, f.micro_batches, f.pp_schedule, f.accumulation == "reduce",
                      f.seed, f.recompute, f.offload_activations, strata::parse_dtype(f.activation_dtype));
    std::unique_ptr<strata::ShardedAdamW> adamw;
    std::unique_ptr<MomentumSgd> sgd;
    if (f.optimizer == "adamw")
      adamw = make_adamw(model, mesh, f.lr, f.weight_decay, f.grad_clip, opts.mixed_precision.param_dtype);
    else
      sgd = std::make_unique<MomentumSgd>(model, mesh, f.momentum, f.weight_decay, f.grad_clip);

    // Checkpoints through the library, whichever optimizer: both are OptimizerStates. The part names the whole model
    // (every stage's layers, tp slices and all), so a checkpoint resumes at any pp and tp.
    strata::OptimizerState& optimizer = adamw ? static_cast<strata::OptimizerState&>(*adamw) : *sgd;
    std::unique_ptr<strata::Checkpointer> checkpointer;
    int first_step = 0;
    if (!f.checkpoint_dir.empty()) {
      strata::CheckpointOptions co;
      co.dir = f.checkpoint_dir;
      checkpointer = std::make_unique<strata::Checkpointer>(model, optimizer, mesh, co,
                                                            strata::CheckpointPart{all_units, {}, f.pp_degree});
      if (f.resume && checkpointer->latest_step() >= 0) {
        first_step = resume(*checkpointer, f.checkpoint_dir, f.batch, f.micro_batches);
        if (rt.rank() == 0)
          std::printf("resumed from %s at step %d with the %s optimizer's state\n", f.checkpoint_dir.c_str(),
                      first_step, optimizer.kind().c_str());
      }
    }
    auto save = [&](int done) { checkpointer->save(done, trainer_state(done, f.batch, f.micro_batches)); };
    const int last_step = f.stop_at > 0 ? std::min(f.stop_at, f.steps) : f.steps;

    const std::size_t numel = strata::global_numel(all_units);
    if (rt.rank() == 0)
      std::printf("custom_trainer: %d ranks (%s), %d units, %zu parameters, optimizer %s; %s\n", world,
                  mesh.shape().describe().c_str(), model.num_units(), numel, f.optimizer.c_str(),
                  opts.describe().c_str());
    // The steps' peak: what the model's construction held only for a moment (its checks across ranks, the init's
    // staging) is not a step's.
    if (f.check_memory) rt.device().memory_stats().reset_peaks();
    for (int step = first_step; step < last_step; ++step) {
      const float scale = adamw ? adamw->loss_scale() : 1.0f;
      // The same global rows at every layout: micro-batch a of this step, this data-parallel rank's share of it.
      const double loss = runner.run(
          [&](int a) {
            return (static_cast<std::uint64_t>(step) * f.micro_batches + a) * static_cast<std::uint64_t>(f.batch) +
                   static_cast<std::uint64_t>(mesh.dp().rank() * dp_rows);
          },
          scale / static_cast<float>(f.micro_batches));
      double norm = 0;
      bool skipped = false;
      if (adamw) {
        const strata::StepResult r = adamw->step(f.lr, step);
        norm = r.grad_norm;
        skipped = r.skipped;
      } else {
        norm = sgd->step(f.lr);
        skipped = std::isnan(norm);
      }
      // The reported loss is the mean over the data-parallel ranks (each rank's is the mean over its rows; the tp
      // ranks of one data-parallel rank hold the same; under --pp the last stage holds it, the others 0).
      const double global =
          strata::sum_over_ranks(mesh.dp_cp(), strata::sum_over_ranks(mesh.pp(), loss)) / mesh.dp_cp().size();
      if (rt.rank() == 0)
        std::printf("step %3d loss %.9f grad_norm %.9f%s\n", step, global, norm,
                    skipped ? " (skipped: non-finite gradients)" : "");
      if (checkpointer && f.checkpoint_every > 0 && (step + 1) % f.checkpoint_every == 0 && step + 1 < last_step)
        save(step + 1);
    }
    if (checkpointer && last_step > first_step) {
      save(last_step);
      if (rt.rank() == 0) std::printf("checkpoint of step %d in %s\n", last_step, f.checkpoint_dir.c_str());
    }
    if (f.check_memory || !f.declaration_out.empty()) {  // the declaration (and its rehearsal) only when asked for
      strata::StepDeclaration declared =
          declare_step(units, opts, mesh, cfg, layers, rows, runner.in_flight(), adamw != nullptr, f.recompute,
                       f.offload_activations, strata::parse_dtype(f.activation_dtype), runner.attention());
      declared.held = runner.held_pool_slots(units, opts);
      if (f.check_memory) check_memory(rt, declared, before, runner.offload());
      if (!f.declaration_out.empty()) write_declaration(rt, f.declaration_out, declared);
    }
    finish_parameters(rt, model, mesh, cfg, f.params_out, f.compare_params, f.params_tolerance);
    auto ledger = strata::MemoryLedger::gather(rt.device(), rt.world());
    if (rt.rank() == 0) {
      std::printf("memory ledger (%s):\n%s", opts.describe().c_str(), strata::MemoryLedger::table(ledger).c_str());
      if (!f.ledger_json.empty())  // every write checked: kIo naming the file and the system error
        strata::write_output_file(f.ledger_json, "--ledger-json", strata::MemoryLedger::json(ledger));
    }
    rt.finish();  // the trace, if on: a failed write is an error
    return 0;
  });
}
