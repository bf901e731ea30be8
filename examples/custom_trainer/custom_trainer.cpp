// custom_trainer: an MLP regression trained through Strata's embedding API, under mpirun at any rank count.
// Prints the loss per step and the memory ledger. See docs/embedding.md.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "models/mlp/mlp.h"
#include "runtime/bootstrap/runtime.h"
#include "core/error.h"
#include "runtime/memory/memory_ledger.h"

int main(int argc, char** argv) {
  CLI::App app{"Train a small MLP regression with Strata's sharding runtime"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // later flags override
  int zero_stage = 3, steps = 20, rows_per_rank = 8, micro_batches = 1, hybrid = 0;
  int hidden = 64, hidden_layers = 3;
  std::string param_dtype = "f32", reduce_dtype = "f32", accumulation = "reduce", ledger_json;
  double lr = 1e-2, weight_decay = 0.01, grad_clip = 1.0;
  std::uint64_t seed = 1;
  bool keep_params = false;
  app.add_option("--zero-stage", zero_stage, "0 (DDP), 1, 2 or 3 (full shard)")->check(CLI::Range(0, 3));
  app.add_option("--steps", steps, "optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--param-dtype", param_dtype, "f32, bf16 or f16")->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_option("--reduce-dtype", reduce_dtype, "f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--rows", rows_per_rank, "rows per rank per micro-batch")->check(CLI::PositiveNumber);
  app.add_option("--grad-accum", micro_batches, "micro-batches per step")->check(CLI::PositiveNumber);
  app.add_option("--accumulation", accumulation, "reduce (every micro-batch) or no-sync")
      ->check(CLI::IsMember({"reduce", "no-sync"}));
  app.add_option("--hybrid", hybrid, "hybrid sharding group size (0: off, -1: ranks per node)");
  app.add_option("--hidden", hidden, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--layers", hidden_layers, "hidden layers")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "learning rate");
  app.add_option("--weight-decay", weight_decay, "AdamW weight decay");
  app.add_option("--grad-clip", grad_clip, "global gradient-norm clip (0: off)");
  app.add_option("--seed", seed, "init and data seed");
  app.add_flag("--no-reshard-after-forward", keep_params, "ZeRO-3: keep gathered parameters for backward");
  app.add_option("--ledger-json", ledger_json, "write the memory ledger of every rank as JSON");
  CLI11_PARSE(app, argc, argv);

  return strata::run_main([&] {
    strata::Runtime rt(&argc, &argv);
    strata::mlp::MlpConfig cfg;
    cfg.in = 16;
    cfg.hidden = hidden;
    cfg.out = 4;
    cfg.hidden_layers = hidden_layers;

    strata::ShardingOptions opts;
    opts.stage = strata::zero_stage_from_int(zero_stage);
    opts.mixed_precision.param_dtype = strata::parse_dtype(param_dtype);
    opts.mixed_precision.reduce_dtype = strata::parse_dtype(reduce_dtype);
    opts.hybrid_shard_size = hybrid;
    opts.reshard_after_forward = !keep_params;
    opts.grad_clip = grad_clip;
    opts.dynamic_loss_scale = opts.mixed_precision.param_dtype == strata::DType::kF16;
    opts.grad_accumulation =
        accumulation == "no-sync" ? strata::GradAccumulation::kNoSync : strata::GradAccumulation::kReduceEveryMicroBatch;
    strata::AdamWConfig adamw;
    adamw.lr = lr;
    adamw.weight_decay = weight_decay;

    strata::ShardedModel model(rt, strata::mlp::mlp_units(cfg), opts, adamw);
    model.init([&](const strata::ParamSlot& s, std::size_t begin, std::size_t count, float* out) {
      strata::mlp::mlp_init(s, begin, count, out, seed);
    });

    const int world = rt.world_size();
    std::size_t numel = 0;
    for (int i = 0; i < model.num_units(); ++i) numel += model.unit(i).layout().numel();
    if (rt.rank() == 0)
      std::printf("custom_trainer: %d ranks, %d units, %zu parameters; %s\n", world, model.num_units(), numel,
                  opts.describe().c_str());
    for (int step = 0; step < steps; ++step) {
      double loss = 0;
      for (int a = 0; a < micro_batches; ++a) {
        model.begin_micro_batch(a, micro_batches);
        std::uint64_t first = (static_cast<std::uint64_t>(step * micro_batches + a) * world + rt.rank()) *
                              static_cast<std::uint64_t>(rows_per_rank);
        auto batch = strata::mlp::make_batch(cfg, first, rows_per_rank, seed);
        loss += strata::mlp::forward_backward(model, cfg, batch, model.loss_scale() / micro_batches) / micro_batches;
      }
      strata::StepResult r = model.step(lr);
      // The reported loss is the mean over ranks.
      double global = 0;
      MPI_Allreduce(&loss, &global, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      if (rt.rank() == 0)
        std::printf("step %3d loss %.6f grad_norm %.4f%s\n", step, global / world, r.grad_norm,
                    r.skipped ? " (skipped: non-finite gradients)" : "");
    }
    auto rows = strata::MemoryLedger::gather(rt.device(), rt.world());
    if (rt.rank() == 0) {
      std::printf("memory ledger (%s):\n%s", opts.describe().c_str(), strata::MemoryLedger::table(rows).c_str());
      if (!ledger_json.empty()) {
        FILE* f = std::fopen(ledger_json.c_str(), "w");
        STRATA_CHECK_CODE(strata::ErrorCode::kIo, f != nullptr, "cannot write {}", ledger_json);
        std::fputs(strata::MemoryLedger::json(rows).c_str(), f);
        std::fclose(f);
      }
    }
    return 0;
  });
}
