// train_gpt: trains the GPT-2 of docs/gpt-model.md with Strata's sharding, under mpirun.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "core/checked_math.h"
#include "core/env.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/host_memory.h"
#include "core/memory_stats.h"
#include "models/gpt/data/token_data.h"
#include "models/gpt/training/gpt_trainer.h"
#include "models/gpt/training/train_flags.h"
#include "models/gpt/training/train_report.h"
#include "models/hf/hf_directory_writer.h"
#include "runtime/bootstrap/config_agreement.h"
#include "runtime/bootstrap/runtime.h"

namespace {

using namespace strata;

// --make-data: a tool mode; only the launcher's first process writes (the file is rank-independent).
int write_synthetic_data(int* argc, char*** argv, const gpt::TrainFlags& f, int data_vocab) {
  Runtime rt(argc, argv, RuntimeOptions{"cpu"});
  if (rt.rank() == 0) {
    check_output_file(f.make_data, "--make-data", OutputKind::kReplaced);
    gpt::make_synthetic_tokens(f.make_data, f.tokens, data_vocab, f.seed);
    std::printf("wrote %llu synthetic tokens (vocab %d, seed %llu) to %s\n", static_cast<unsigned long long>(f.tokens),
                data_vocab, static_cast<unsigned long long>(f.seed), f.make_data.c_str());
  }
  rt.finish();
  return 0;
}

// The steps this run trains, [start_step, f.last_step()): a resume past the end is refused, not run as zero steps
// that report a checkpoint never written.
void check_steps_left(const gpt::TrainFlags& f, const gpt::GptTrainer& trainer, int rank) {
  const int start = trainer.start_step(), last = f.last_step();
  STRATA_CHECK(start <= f.steps,
               "--resume: the checkpoint is at step {}, past --steps {}: nothing to train (give --steps {} or more to "
               "continue it)",
               start, f.steps, start + 1);
  STRATA_CHECK(start <= last, "--resume: the checkpoint is at step {}, past --stop-at {}", start, f.stop_at);
  if (rank == 0 && start == last && trainer.resumed_from() >= 0) {
    std::printf("train_gpt: nothing to train: the checkpoint is at step %d, where %s ends\n", last,
                last == f.steps ? "--steps" : "--stop-at");
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"train_gpt: the spec's GPT-2 trained with Strata (run under mpirun)"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // later flags override
  gpt::TrainFlags f;
  gpt::add_train_flags(app, f);
  CLI11_PARSE(app, argc, argv);

  return run_main([&] {
    const int data_vocab = gpt::apply_preset(app, f);
    // Synthetic tokens are held in memory (uint16) before they are written or used.
    check_addressable(checked_product("the synthetic tokens (2 bytes x --tokens)", 2, f.tokens), "--tokens");
    if (!f.make_data.empty()) return write_synthetic_data(&argc, &argv, f, data_vocab);
    if (!f.trace.empty()) {
      Env e = env();
      e.trace_file = f.trace;
      set_env(e);
    }
    Runtime rt(&argc, &argv, RuntimeOptions{f.backend});
    const std::uint64_t rss_at_start = resident_bytes();
    gpt::apply_global_batch(app, f, rt.world_size());
    check_config_agreement(gpt::effective_configuration(f));  // before any rank acts on a setting the others lack
    gpt::check_run_files(f, rt);
    gpt::TokenFile data = gpt::open_tokens(f, data_vocab);
    const std::optional<gpt::TokenFile> val = gpt::open_val_tokens(f);
    const gpt::TrainConfig cfg = gpt::train_config(f, rt);
    if (cfg.shuffle) data.shuffle_windows(cfg.seed);
    if (!f.device_memory.empty())
      rt.device().set_memory_budget(parse_memory_budget(f.device_memory, "--device-memory"));

    gpt::CategoryBytes before{};
    for (std::size_t i = 0; i < kNumMemCategories; ++i)
      before[i] = rt.device().memory_stats().current(static_cast<MemCategory>(i));
    gpt::GptTrainer trainer(rt, cfg, data);    // validates cfg first, on every rank
    rt.device().memory_stats().reset_peaks();  // construction transients are not part of a step

    gpt::print_run_banner(f, cfg, trainer, rt, data);
    const gpt::Throughput throughput(cfg.model, cfg.seq, f.peak_tflops, rt.device(), cfg.precision.matmul,
                                     rt.world_size());
    if (rt.rank() == 0) {
      std::printf("train_gpt: %s\n", throughput.describe(rt.device()).c_str());
      std::fflush(stdout);
    }
    gpt::RunLog log(f, cfg, trainer, rt, throughput, before, rss_at_start);
    check_steps_left(f, trainer, rt.rank());
    for (int step = trainer.start_step(); step < f.last_step(); ++step) {
      log.step(step, trainer.step(step));
      const bool last = step + 1 == f.last_step();
      if (val && (last || (f.eval_every > 0 && (step + 1) % f.eval_every == 0)))
        log.eval(step, trainer.evaluate(*val, f.eval_steps));
    }
    log.close_metrics();
    trainer.finish();
    log.print_checkpoint();
    if (!f.save.empty()) trainer.save(f.save);
    if (!f.save_hf.empty())
      trainer.save_hf(f.save_hf, parse_bytes(f.save_shard_size, "--save-shard-size"), hf::tokenizer_files(f.init_dir));
    log.print_summary();
    rt.finish();  // the trace, if on: a failed write is an error here, not a log line at exit
    return 0;
  });
}
