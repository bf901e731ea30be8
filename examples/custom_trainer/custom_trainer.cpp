// custom_trainer: an MLP regression trained through Strata's embedding API under mpirun at any rank count, with
// Strata's ShardedAdamW or with a momentum SGD written here against the model's shard views (the optimizer is the
// trainer's choice). Prints the loss per step and the memory ledger. See docs/embedding.md.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include <strata/strata.h>  // the public API, as an embedder outside this tree includes it

#include "core/checked_math.h"
#include "models/common/flag_checks.h"
#include "models/mlp/mlp.h"

namespace flags = strata::flags;

namespace {

// Momentum SGD as torch.optim.SGD computes it (dampening 0): d = g + wd * p (decayed slots), b = mu * b + d,
// p -= lr * b; with global-norm clipping first. It updates this rank's f32 shards through ShardedParameters: the
// runtime gathers, reduces and publishes; the arithmetic is this trainer's. The MLP runs on the CPU backend, where
// the shards are host memory, so plain loops do.
class MomentumSgd {
 public:
  MomentumSgd(strata::ShardedModel& model, double momentum, double weight_decay, double clip)
      : params_(model.parameters()),
        momentum_(static_cast<float>(momentum)),
        weight_decay_(static_cast<float>(weight_decay)),
        clip_(clip),
        norm_(params_, params_.partition_groups()) {
    STRATA_CHECK_CODE(strata::ErrorCode::kUnsupported, params_.device().kind() == strata::DeviceKind::kCpu,
                      "this SGD updates host memory; its shards live on {}", params_.device().name());
    for (int u = 0; u < params_.num_units(); ++u) velocity_.emplace_back(params_.unit(u).numel(), 0.0f);
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
    const float rate = static_cast<float>(lr);
    for (int u = 0; u < params_.num_units(); ++u) {
      params_.begin_update(u);
      params_.stream().synchronize();  // the shards' memory is ours to touch from the host now
      const strata::UnitShard shard = params_.unit(u);
      float* b = velocity_[static_cast<std::size_t>(u)].data();
      for (const strata::ShardSegment& seg : shard.segments) {
        const strata::ParamSlot& slot = shard.layout->slots()[seg.slot];
        if (!slot.trainable) continue;
        const float wd = slot.weight_decay ? weight_decay_ : 0.0f;
        for (std::size_t i = seg.shard_begin; i < seg.shard_begin + seg.length; ++i) {
          const float d = coef * shard.grad[i] + wd * shard.master[i];
          b[i] = momentum_ * b[i] + d;
          shard.master[i] -= rate * b[i];
        }
      }
      params_.end_update(u);
    }
    params_.finish_step(++steps_, true);
    return norm;
  }

 private:
  strata::ShardedParameters& params_;
  float momentum_, weight_decay_;
  double clip_;
  strata::GradNorm norm_;
  std::vector<std::vector<float>> velocity_;  // per unit, [shard_numel]
  std::int64_t steps_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a small MLP regression with Strata's sharding runtime"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // later flags override
  int zero_stage = 3, steps = 20, batch = 24, micro_batches = 1, dp_replicate = 1;
  int hidden = 64, hidden_layers = 3;
  std::string param_dtype = "f32", reduce_dtype = "f32", accumulation = "reduce", ledger_json, optimizer = "adamw";
  double lr = 1e-2, weight_decay = 0.01, grad_clip = 1.0, momentum = 0.9;
  std::uint64_t seed = 1;
  bool keep_params = false;
  app.add_option("--zero-stage", zero_stage, "0 (DDP), 1, 2 or 3 (full shard)")->check(flags::integer(0, 3));
  app.add_option("--steps", steps, "optimizer steps")->check(flags::positive_integer());
  app.add_option("--param-dtype", param_dtype, "f32, bf16 or f16")->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_option("--reduce-dtype", reduce_dtype, "f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--batch", batch, "rows per micro-batch over all ranks (each rank takes batch / ranks)")
      ->check(flags::positive_integer());
  app.add_option("--grad-accum", micro_batches, "micro-batches per step")->check(flags::positive_integer());
  app.add_option("--accumulation", accumulation, "reduce (every micro-batch) or no-sync (only the last)")
      ->check(CLI::IsMember({"reduce", "no-sync"}));
  app.add_option("--dp-replicate", dp_replicate,
                 "hybrid sharding: replicate the state across this many groups, each sharding it over ranks / "
                 "dp-replicate ranks")
      ->check(flags::positive_integer());
  app.add_option("--optimizer", optimizer, "adamw (Strata's ShardedAdamW) or sgd (momentum SGD written here)")
      ->check(CLI::IsMember({"adamw", "sgd"}));
  app.add_option("--momentum", momentum, "SGD momentum")->check(flags::real(0.0, false, 1.0, false));
  app.add_option("--hidden", hidden, "hidden width")->check(flags::positive_integer());
  app.add_option("--layers", hidden_layers, "hidden layers")->check(flags::positive_integer());
  app.add_option("--lr", lr, "learning rate")->check(flags::non_negative_real());
  app.add_option("--weight-decay", weight_decay, "weight decay (decoupled for AdamW, added to the gradient for SGD)")
      ->check(flags::non_negative_real());
  app.add_option("--grad-clip", grad_clip, "global gradient-norm clip (0: off)")->check(flags::non_negative_real());
  app.add_option("--seed", seed, "init and data seed")->check(flags::unsigned_integer());
  app.add_flag("--no-reshard-after-forward", keep_params, "ZeRO-3: keep gathered parameters for backward");
  app.add_option("--ledger-json", ledger_json, "write the memory ledger of every rank as JSON");
  CLI11_PARSE(app, argc, argv);

  return strata::run_main([&] {
    strata::Runtime rt(&argc, &argv);
    auto v = [](auto x) { return fmt::format("{}", x); };  // every rank must run this configuration
    strata::check_config_agreement(
        {{"program", "custom_trainer"}, {"--zero-stage", v(zero_stage)}, {"--steps", v(steps)},
         {"--param-dtype", param_dtype}, {"--reduce-dtype", reduce_dtype}, {"--batch", v(batch)},
         {"--grad-accum", v(micro_batches)}, {"--accumulation", accumulation}, {"--dp-replicate", v(dp_replicate)},
         {"--optimizer", optimizer}, {"--momentum", v(momentum)}, {"--hidden", v(hidden)},
         {"--layers", v(hidden_layers)}, {"--lr", v(lr)}, {"--weight-decay", v(weight_decay)},
         {"--grad-clip", v(grad_clip)}, {"--seed", v(seed)}, {"--no-reshard-after-forward", v(keep_params)},
         {"--ledger-json", ledger_json}});
    const int world = rt.world_size();
    std::string problem;  // the output path, checked before the first step on the rank that writes it
    if (rt.rank() == 0 && !ledger_json.empty()) {
      try {
        strata::check_output_file(ledger_json, "--ledger-json", strata::OutputKind::kDirect);
      } catch (const std::exception& e) {
        problem = e.what();
      }
    }
    strata::all_agree(rt.world(), problem.empty(), problem, "checking --ledger-json " + ledger_json);
    STRATA_CHECK(batch % world == 0, "--batch {} rows must divide among the {} ranks", batch, world);
    const int rows = batch / world;
    strata::mlp::MlpConfig cfg;
    cfg.in = 16;
    cfg.hidden = hidden;
    cfg.out = 4;
    cfg.hidden_layers = hidden_layers;
    cfg.validate_sizes(rows);  // before any allocation: --hidden and --layers multiply
    // The data rows a run draws: the row index of the last one must not wrap around.
    strata::checked_product("rows drawn (--steps x --grad-accum x --batch)", steps, micro_batches, batch);

    strata::ShardingOptions opts;
    opts.stage = strata::zero_stage_from_int(zero_stage);
    opts.mixed_precision.param_dtype = strata::parse_dtype(param_dtype);
    opts.mixed_precision.reduce_dtype = strata::parse_dtype(reduce_dtype);
    opts.reshard_after_forward = !keep_params;
    STRATA_CHECK(optimizer == "adamw" || opts.mixed_precision.param_dtype != strata::DType::kF16,
                 "--optimizer sgd has no loss scaling: use --param-dtype f32 or bf16");

    // Every rank is data-parallel: dp_replicate groups, each sharding the state over world / dp_replicate ranks.
    strata::DeviceMesh mesh(rt, strata::MeshDims{1, dp_replicate, -1, 1});
    strata::ShardedModel model(mesh, strata::mlp::mlp_units(cfg), opts);
    model.init([&](const strata::ParamSlot& s, std::size_t begin, std::size_t count, float* out) {
      strata::mlp::mlp_init(s, begin, count, out, seed);
    });
    std::unique_ptr<strata::ShardedAdamW> adamw;
    std::unique_ptr<MomentumSgd> sgd;
    if (optimizer == "adamw") {
      strata::AdamWConfig config;
      config.lr = lr;
      config.weight_decay = weight_decay;
      strata::OptimizerOptions o;
      o.grad_clip = grad_clip;
      o.dynamic_loss_scale = opts.mixed_precision.param_dtype == strata::DType::kF16;
      adamw = std::make_unique<strata::ShardedAdamW>(model, config, o);
    } else {
      sgd = std::make_unique<MomentumSgd>(model, momentum, weight_decay, grad_clip);
    }

    std::size_t numel = 0;
    for (int i = 0; i < model.num_units(); ++i) numel += model.layout(i).numel();
    if (rt.rank() == 0)
      std::printf("custom_trainer: %d ranks (%s), %d units, %zu parameters, optimizer %s; %s\n", world,
                  mesh.shape().describe().c_str(), model.num_units(), numel, optimizer.c_str(),
                  opts.describe().c_str());
    for (int step = 0; step < steps; ++step) {
      double loss = 0;
      const float scale = adamw ? adamw->loss_scale() : 1.0f;
      for (int a = 0; a < micro_batches; ++a) {
        const bool last = a == micro_batches - 1;
        model.set_requires_gradient_sync(accumulation == "reduce" || last);
        model.set_is_last_backward(last);
        // The same global rows at every rank count: micro-batch a of this step, this rank's share of it.
        const std::uint64_t first =
            (static_cast<std::uint64_t>(step) * micro_batches + a) * static_cast<std::uint64_t>(batch) +
            static_cast<std::uint64_t>(rt.rank() * rows);
        auto data = strata::mlp::make_batch(cfg, first, rows, seed);
        loss += strata::mlp::forward_backward(model, cfg, data, scale / static_cast<float>(micro_batches)) /
                micro_batches;
      }
      double norm = 0;
      bool skipped = false;
      if (adamw) {
        const strata::StepResult r = adamw->step(lr, step);
        norm = r.grad_norm;
        skipped = r.skipped;
      } else {
        norm = sgd->step(lr);
        skipped = std::isnan(norm);
      }
      // The reported loss is the mean over ranks (each rank's is the mean over its rows).
      const double global = strata::sum_over_ranks(rt.world(), loss) / world;
      if (rt.rank() == 0)
        std::printf("step %3d loss %.9f grad_norm %.9f%s\n", step, global, norm,
                    skipped ? " (skipped: non-finite gradients)" : "");
    }
    auto ledger = strata::MemoryLedger::gather(rt.device(), rt.world());
    if (rt.rank() == 0) {
      std::printf("memory ledger (%s):\n%s", opts.describe().c_str(), strata::MemoryLedger::table(ledger).c_str());
      if (!ledger_json.empty())  // every write checked: kIo naming the file and the system error
        strata::write_output_file(ledger_json, "--ledger-json", strata::MemoryLedger::json(ledger));
    }
    rt.finish();  // the trace, if on: a failed write is an error
    return 0;
  });
}
