// train_gpt: trains the GPT-2 of docs/gpt-model.md with Strata's sharding, under mpirun.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <thread>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/common/flag_checks.h"
#include "models/gpt/training/gpt_memory.h"
#include "models/gpt/training/gpt_presets.h"
#include "models/gpt/training/gpt_trainer.h"
#include "models/gpt/model/cpu_ops.h"
#include "models/gpt/model/model_flops.h"
#include "core/safetensors.h"
#include "models/gpt/data/token_data.h"
#include "runtime/bootstrap/config_agreement.h"
#include "runtime/bootstrap/runtime.h"
#include "collectives/rank_values.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/logging.h"
#include "core/output_file.h"
#include "runtime/memory/memory_ledger.h"
#include "runtime/parallel/node_layout.h"

namespace {

namespace flags = strata::flags;

struct Flags {
  strata::gpt::GptConfig model;
  int seq = 8, batch = 4, steps = 20, grad_accum = 1, zero_stage = 3, dp_replicate = 1, tp = 1;
  double lr = 1e-3, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, grad_clip = 1.0;
  std::uint64_t seed = 1, tokens = 1 << 16;
  std::string init, save, data, text, make_data, metrics, backend, param_dtype = "f32", reduce_dtype = "f32",
              compute_dtype = "auto";
  bool recompute = false, no_progress = false, sequence_parallel = false;
  int prefetch = 1, warmup = 0;
  bool cosine = false;
  std::string trace, offload = "none", device_memory;
  std::string checkpoint_dir;
  int checkpoint_every = 0, keep_checkpoints = 2, stop_at = -1;
  bool checkpoint_async = false, resume = false;
  int max_skipped_steps = 10;
  int pp = 1, pp_virtual = 1, microbatches = 0;
  std::string pp_schedule = "1f1b", dp_shard;
  bool pp_reshard = false, verbose = false;
  std::string model_name;  // --model: a preset's shape; explicit shape flags override it
  double peak_tflops = 0;  // --peak-tflops: the MFU denominator per device (0: from the device's name)
};

// The preset's shape for every shape flag not given on the command line (explicit flags win, as later flags do).
// Returns the vocabulary synthetic tokens are drawn from: the preset's tokenizer's (GPT-2's 50257, not the padded
// rows) unless --vocab was given.
int apply_preset(CLI::App& app, Flags& f) {
  if (f.model_name.empty()) return f.model.vocab;
  const strata::gpt::GptPreset& p = strata::gpt::find_gpt_preset(f.model_name);
  auto unset = [&](const char* flag) { return app.get_option(flag)->count() == 0; };
  if (unset("--layers")) f.model.layers = p.model.layers;
  if (unset("--heads")) f.model.heads = p.model.heads;
  if (unset("--embd")) f.model.embd = p.model.embd;
  if (unset("--vocab")) f.model.vocab = p.model.vocab;
  if (unset("--ctx")) f.model.ctx = p.model.ctx;
  if (unset("--seq")) f.seq = p.seq;
  return unset("--vocab") ? p.vocab_tokens : f.model.vocab;
}

void add_flags(CLI::App& app, Flags& f) {
  std::string presets;
  for (const strata::gpt::GptPreset& p : strata::gpt::gpt_presets())
    presets += fmt::format("{}{} ({} layers, {} heads, width {}, vocabulary {} padded to {}, sequence {})",
                           presets.empty() ? "" : "; ", p.name, p.model.layers, p.model.heads, p.model.embd,
                           p.vocab_tokens, p.model.vocab, p.seq);
  app.add_option("--model", f.model_name, "a named model shape: " + presets +
                                              ". --layers, --heads, --embd, --vocab, --ctx and --seq given as well "
                                              "override it");
  app.add_option("--peak-tflops", f.peak_tflops,
                 "peak TFLOP/s of one device for the MFU figure (default: known for H100, H200 and A100 from the "
                 "device's name; none on the CPU)")
      ->check(flags::positive_real());
  app.add_option("--layers", f.model.layers, "transformer blocks")->check(flags::positive_integer());
  app.add_option("--heads", f.model.heads, "attention heads")->check(flags::positive_integer());
  app.add_option("--embd", f.model.embd, "embedding width C (a multiple of --heads)")->check(flags::positive_integer());
  app.add_option("--vocab", f.model.vocab, "vocabulary size (256 with --text)")->check(flags::integer(2, 65536));
  app.add_option("--ctx", f.model.ctx, "positions in wpe")->check(flags::positive_integer());
  app.add_option("--seq", f.seq, "sequence length T (<= --ctx)")->check(flags::positive_integer());
  app.add_option("--batch", f.batch,
                 "rows per data-parallel rank per micro-batch (with --microbatches or --pp: per step, split into the "
                 "micro-batches)")
      ->check(flags::positive_integer());
  app.add_option("--steps", f.steps, "optimizer steps")->check(flags::non_negative_integer());
  app.add_option("--lr", f.lr, "learning rate (constant unless --warmup / --cosine)")
      ->check(flags::non_negative_real());
  app.add_option("--warmup", f.warmup, "linear learning-rate warmup over this many steps")
      ->check(flags::non_negative_integer());
  app.add_flag("--cosine", f.cosine, "cosine decay of the learning rate to lr/10 at the last step");
  app.add_option("--weight-decay", f.weight_decay, "AdamW weight decay (2-D parameters)")
      ->check(flags::non_negative_real());
  app.add_option("--beta1", f.beta1, "AdamW beta1")->check(flags::real(0.0, false, 1.0, true));
  app.add_option("--beta2", f.beta2, "AdamW beta2")->check(flags::real(0.0, false, 1.0, true));
  app.add_option("--eps", f.eps, "AdamW eps")->check(flags::positive_real());
  app.add_option("--grad-clip", f.grad_clip, "global gradient-norm clip (0: off)")->check(flags::non_negative_real());
  app.add_option("--max-skipped-steps", f.max_skipped_steps,
                 "stop with an error after this many steps in a row skipped for non-finite gradients (with f16, those "
                 "at loss scale 1; 0: never stop)")
      ->check(flags::non_negative_integer());
  app.add_option("--seed", f.seed, "seed of the init (without --init) and of --make-data")
      ->check(flags::unsigned_integer());
  app.add_option("--init", f.init, "initial weights (safetensors, the spec's names)")->check(CLI::ExistingFile);
  app.add_option("--save", f.save, "write the final weights here (safetensors, F32)");
  auto* data = app.add_option("--data", f.data, "training tokens (flat uint16)")->check(CLI::ExistingFile);
  auto* text = app.add_option("--text", f.text, "train a byte-level model (vocab 256) on this text file")
                   ->check(CLI::ExistingFile);
  data->excludes(text);
  app.add_option("--make-data", f.make_data, "write the spec's synthetic tokens to this file and exit");
  app.add_option("--tokens", f.tokens, "number of synthetic tokens (with --make-data, or without --data)")
      ->check(flags::unsigned_integer(1));
  app.add_option("--zero-stage", f.zero_stage, "0 (DDP), 1, 2 or 3")->check(flags::integer(0, 3));
  app.add_option("--dp-replicate", f.dp_replicate,
                 "hybrid sharding: replicate the state across this many groups, each sharding it over the ranks / "
                 "dp-replicate ranks of its group (1: shard over every rank)")
      ->check(flags::positive_integer());
  app.add_option("--dp-shard", f.dp_shard,
                 "node: hybrid sharding by node, each node's ranks shard the state and the nodes replicate it "
                 "(docs/multi-node.md)")
      ->check(CLI::IsMember({"node"}));
  app.add_option("--tp", f.tp,
                 "tensor-parallel degree: each block's matmuls, the embedding and the loss split over this many "
                 "consecutive ranks (data parallelism is the rest of the world)")
      ->check(flags::positive_integer());
  app.add_flag("--sequence-parallel", f.sequence_parallel,
               "with --tp: LayerNorm and residual regions hold seq / tp positions per rank");
  app.add_option("--pp", f.pp,
                 "pipeline stages: contiguous blocks per stage, the outermost mesh dimension (docs/pipeline-parallel.md)")
      ->check(flags::positive_integer());
  app.add_option("--pp-schedule", f.pp_schedule, "gpipe, 1f1b or interleaved");
  app.add_option("--pp-virtual", f.pp_virtual, "model chunks per pipeline rank (interleaved schedule)")
      ->check(flags::positive_integer());
  app.add_option("--microbatches", f.microbatches,
                 "split each step's --batch rows into this many micro-batches (default: --pp); a pipeline streams them")
      ->check(flags::positive_integer());
  app.add_flag("--pp-reshard", f.pp_reshard,
               "under a pipeline, reduce and free each unit after every micro-batch instead of once per step");
  app.add_flag("--verbose", f.verbose, "print the pipeline schedule of every rank");
  app.add_option("--param-dtype", f.param_dtype, "f32, bf16 or f16")->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_option("--compute-dtype", f.compute_dtype,
                 "f32, bf16 (matmul and attention products on bf16 operands, f32 accumulation), or auto: bf16 with "
                 "--param-dtype bf16, else f32")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
  app.add_option("--reduce-dtype", f.reduce_dtype, "f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--grad-accum", f.grad_accum, "micro-batches per step")->check(flags::positive_integer());
  app.add_flag("--recompute", f.recompute, "keep only each block's input; recompute it in backward");
  app.add_option("--backend", f.backend,
                 "auto (the default, from STRATA_BACKEND): CUDA when every rank on a node has its own GPU, else cpu; "
                 "or cpu, cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--metrics", f.metrics, "write one JSON record per step to this file");
  app.add_option("--prefetch", f.prefetch, "units gathered ahead (0: no prefetch)")->check(flags::integer(0, 8));
  app.add_option("--trace", f.trace, "write a Chrome trace / Perfetto JSON of all ranks here (as STRATA_TRACE)");
  app.add_flag("--no-progress", f.no_progress, "no progress bar on a terminal");
  app.add_option("--offload", f.offload, "optimizer state (and parameter shards) in host memory: none, optimizer or "
                                         "optimizer+params (ZeRO-3)")
      ->check(CLI::IsMember({"none", "optimizer", "optimizer+params"}));
  app.add_option("--checkpoint-dir", f.checkpoint_dir,
                 "sharded checkpoints here (docs/checkpoint.md); one after the last step, and with --checkpoint-every");
  app.add_option("--checkpoint-every", f.checkpoint_every, "also checkpoint every N steps")
      ->check(flags::non_negative_integer());
  app.add_flag("--checkpoint-async", f.checkpoint_async, "write checkpoints in the background while training goes on");
  app.add_option("--keep-checkpoints", f.keep_checkpoints, "committed checkpoints to keep (older ones go)")
      ->check(flags::positive_integer());
  app.add_option("--stop-at", f.stop_at,
                 "stop after this many steps of the --steps schedule, as a job whose time runs out (a checkpoint is "
                 "written there); --resume continues")
      ->check(flags::non_negative_integer());
  app.add_flag("--resume", f.resume, "continue from the latest committed checkpoint in --checkpoint-dir (without one, "
                                     "start fresh)");
  app.add_option("--device-memory", f.device_memory,
                 "device memory budget per rank, e.g. 200MiB (as STRATA_DEVICE_MEMORY): going over it is an error "
                 "with the ledger and the planner's advice");
}

// The size in bytes of a file, as text ("missing" when it cannot be read), so ranks compare their data, not only its
// path.
std::string file_size_text(const std::string& path) {
  std::error_code ec;
  auto bytes = std::filesystem::file_size(path, ec);
  return ec ? std::string("missing") : std::to_string(bytes);
}

// The whole effective configuration, which every rank must share (strata::check_config_agreement). Display-only
// flags (--no-progress) are left out; no flag of train_gpt may legitimately differ per rank.
std::vector<strata::ConfigField> effective_configuration(const Flags& f) {
  auto num = [](auto v) { return fmt::format("{}", v); };
  auto on = [](bool b) { return std::string(b ? "on" : "off"); };
  std::vector<strata::ConfigField> c = {
      {"program", "train_gpt"}, {"--model", f.model_name}, {"--peak-tflops", num(f.peak_tflops)},
      {"--layers", num(f.model.layers)}, {"--heads", num(f.model.heads)}, {"--embd", num(f.model.embd)},
      {"--vocab", num(f.model.vocab)}, {"--ctx", num(f.model.ctx)}, {"--seq", num(f.seq)},
      {"--batch", num(f.batch)}, {"--grad-accum", num(f.grad_accum)}, {"--steps", num(f.steps)},
      {"--stop-at", num(f.stop_at)}, {"--lr", num(f.lr)}, {"--warmup", num(f.warmup)}, {"--cosine", on(f.cosine)},
      {"--weight-decay", num(f.weight_decay)}, {"--beta1", num(f.beta1)}, {"--beta2", num(f.beta2)},
      {"--eps", num(f.eps)}, {"--grad-clip", num(f.grad_clip)}, {"--seed", num(f.seed)},
      {"--max-skipped-steps", num(f.max_skipped_steps)},
      {"--param-dtype", f.param_dtype}, {"--compute-dtype", f.compute_dtype},
      {"--reduce-dtype", f.reduce_dtype}, {"--zero-stage", num(f.zero_stage)},
      {"--tp", num(f.tp)}, {"--sequence-parallel", on(f.sequence_parallel)}, {"--pp", num(f.pp)},
      {"--pp-schedule", f.pp_schedule}, {"--pp-virtual", num(f.pp_virtual)}, {"--microbatches", num(f.microbatches)},
      {"--pp-reshard", on(f.pp_reshard)},
      {"--dp-replicate", num(f.dp_replicate)}, {"--dp-shard", f.dp_shard}, {"--prefetch", num(f.prefetch)}, {"--offload", f.offload},
      {"--recompute", on(f.recompute)}, {"--init", f.init},
      {"--init size", f.init.empty() ? "" : file_size_text(f.init)}, {"--data", f.data},
      {"--data size", f.data.empty() ? "" : file_size_text(f.data)}, {"--text", f.text},
      {"--text size", f.text.empty() ? "" : file_size_text(f.text)},
      {"--tokens", f.data.empty() && f.text.empty() ? num(f.tokens) : ""},
      {"--checkpoint-dir", f.checkpoint_dir}, {"--checkpoint-every", num(f.checkpoint_every)},
      {"--keep-checkpoints", num(f.keep_checkpoints)}, {"--checkpoint-async", on(f.checkpoint_async)},
      {"--resume", on(f.resume)}, {"--save", f.save}, {"--metrics", f.metrics}, {"--trace", f.trace},
      {"--backend", f.backend}, {"--device-memory", f.device_memory}};
  return c;
}

// A one-line progress bar with an ETA, redrawn on stderr when it is a terminal.
void progress(int done, int total, double mean_ms) {
  int width = 30, filled = total ? done * width / total : width;
  double eta_s = (total - done) * mean_ms / 1000.0;
  std::fprintf(stderr, "\r[%.*s%*s] %d/%d ETA %.0fs ", filled, "##############################", width - filled, "",
               done, total, eta_s);
  if (done == total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"train_gpt: the spec's GPT-2 trained with Strata (run under mpirun)"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // later flags override
  Flags f;
  add_flags(app, f);
  CLI11_PARSE(app, argc, argv);

  return strata::run_main([&] {
    using namespace strata;
    const int data_vocab = apply_preset(app, f);
    // Synthetic tokens are held in memory (uint16) before they are written or used.
    check_addressable(checked_product("the synthetic tokens (2 bytes x --tokens)", 2, f.tokens), "--tokens");
    if (!f.make_data.empty()) {
      // A tool mode: only the launcher's first process writes (the file is rank-independent).
      Runtime rt(&argc, &argv, RuntimeOptions{"cpu"});
      if (rt.rank() == 0) {
        check_output_file(f.make_data, "--make-data", OutputKind::kReplaced);
        gpt::make_synthetic_tokens(f.make_data, f.tokens, data_vocab, f.seed);
        std::printf("wrote %llu synthetic tokens (vocab %d, seed %llu) to %s\n",
                    static_cast<unsigned long long>(f.tokens), data_vocab, static_cast<unsigned long long>(f.seed),
                    f.make_data.c_str());
      }
      rt.finish();
      return 0;
    }
    if (!f.trace.empty()) {
      Env e = env();
      e.trace_file = f.trace;
      set_env(e);
    }
    Runtime rt(&argc, &argv, RuntimeOptions{f.backend});
    check_config_agreement(effective_configuration(f));  // before any rank acts on a setting the others lack
    const int world = rt.world_size(), rank = rt.rank();
    if (!f.text.empty()) f.model.vocab = 256;
    f.model.validate();
    STRATA_CHECK(f.seq <= f.model.ctx, "--seq {} exceeds --ctx {}", f.seq, f.model.ctx);
    {
      // Every file the run reads or writes, checked before the first step on each rank that uses it, and agreed: a
      // bad path stops every rank now, not after the steps (the trace is checked in the Runtime).
      std::string problem;
      try {
        if (!f.init.empty()) check_input_file(f.init, "--init");
        if (!f.data.empty()) check_input_file(f.data, "--data");
        if (!f.text.empty()) check_input_file(f.text, "--text");
        // The checkpoint directory first: it is created now, as the run would, which may make --save's directory.
        if (!f.checkpoint_dir.empty()) prepare_output_dir(f.checkpoint_dir, "--checkpoint-dir");
        if (!f.save.empty()) check_output_file(f.save, "--save", OutputKind::kReplaced);  // every rank writes its part
        if (rank == 0 && !f.metrics.empty()) check_output_file(f.metrics, "--metrics", OutputKind::kDirect);
      } catch (const Error& e) {
        problem = e.what();
      }
      all_agree(rt.world(), problem.empty(), problem, "checking the files of the run");
    }

    gpt::TokenFile data = !f.text.empty()   ? gpt::TokenFile::from_text(f.text, f.seq)
                          : !f.data.empty() ? gpt::TokenFile::open(f.data, f.seq, f.model.vocab)
                                            : gpt::TokenFile::from_tokens(gpt::synthetic_tokens(f.tokens, data_vocab, f.seed),
                                                                          f.seq, f.model.vocab, "<synthetic>");

    gpt::TrainConfig cfg;
    cfg.model = f.model;
    cfg.seq = f.seq;
    cfg.batch = f.batch;
    cfg.grad_accum = f.grad_accum;
    cfg.adamw = AdamWConfig{f.lr, f.beta1, f.beta2, f.eps, f.weight_decay};
    cfg.sharding.stage = zero_stage_from_int(f.zero_stage);
    cfg.sharding.mixed_precision = {parse_dtype(f.param_dtype), parse_dtype(f.reduce_dtype)};
    cfg.precision.matmul = f.compute_dtype == "auto" ? (f.param_dtype == "bf16" ? DType::kBF16 : DType::kF32)
                                                     : parse_dtype(f.compute_dtype);
    cfg.optimizer.grad_clip = f.grad_clip;
    cfg.optimizer.max_skipped_steps = f.max_skipped_steps;
    cfg.optimizer.dynamic_loss_scale = cfg.sharding.mixed_precision.param_dtype == DType::kF16;
    cfg.dp_replicate = f.dp_replicate;
    if (f.dp_shard == "node") {
      STRATA_CHECK(f.dp_replicate == 1, "--dp-shard node sets the replicas (one per node); drop --dp-replicate {}",
                   f.dp_replicate);
      cfg.dp_replicate = node_aligned_dims(rt.node_of_rank(), f.pp, f.tp).dp_replicate;
    }
    // Layout errors before any allocation, on every rank, naming the values.
    STRATA_CHECK(world % f.tp == 0, "--tp {} does not divide the world size {}", f.tp, world);
    STRATA_CHECK(world % (f.tp * f.pp) == 0, "--pp {} x --tp {} does not divide the world size {}", f.pp, f.tp, world);
    STRATA_CHECK(!f.sequence_parallel || f.tp > 1, "--sequence-parallel needs --tp 2 or more");
    f.model.validate_tp(f.tp, f.sequence_parallel, f.seq);
    f.model.validate_sizes(f.batch, f.seq, f.tp);
    cfg.tp = f.tp;
    cfg.sequence_parallel = f.sequence_parallel;
    cfg.pp = f.pp;
    cfg.pp_schedule = parse_pipeline_schedule(f.pp_schedule);
    cfg.pp_virtual = f.pp_virtual;
    cfg.microbatches = f.microbatches;
    cfg.pp_keep_gathered = !f.pp_reshard;
    cfg.validate_pipeline();  // on every rank, before anything is allocated
    cfg.sharding.prefetch_depth = f.prefetch;
    cfg.sharding.offload = offload_from_name(f.offload);
    if (!f.device_memory.empty()) rt.device().set_memory_budget(parse_bytes(f.device_memory, "--device-memory"));
    cfg.warmup_steps = f.warmup;
    cfg.cosine_steps = f.cosine ? f.steps : 0;
    cfg.recompute = f.recompute;
    STRATA_CHECK(!f.resume || !f.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
    STRATA_CHECK(f.checkpoint_every == 0 || !f.checkpoint_dir.empty(), "--checkpoint-every needs --checkpoint-dir");
    cfg.checkpoint.dir = f.checkpoint_dir;
    cfg.checkpoint.keep = f.keep_checkpoints;
    cfg.checkpoint.async = f.checkpoint_async;
    cfg.checkpoint_every = f.checkpoint_every;
    cfg.resume = f.resume;
    cfg.init = f.init;
    cfg.seed = f.seed;
    gpt::CategoryBytes before{};
    for (std::size_t i = 0; i < kNumMemCategories; ++i)
      before[i] = rt.device().memory_stats().current(static_cast<MemCategory>(i));
    gpt::GptTrainer trainer(rt, cfg, data);
    rt.device().memory_stats().reset_peaks();  // construction transients are not part of a step

    if (rank == 0) {
      // What the products run on: the CPU's bf16 path depends on the CPU (oneDNN's matmul, or rounded operands through
      // sgemm where it has none), so the log names it.
      const std::string compute =
          cfg.precision.matmul != DType::kBF16 ? std::string("compute f32")
          : rt.backend() == DeviceKind::kCpu   ? fmt::format("compute bf16 (f32 accumulation; {})", gpt::bf16_gemm_name())
                                               : std::string("compute bf16 (f32 accumulation; cuBLAS bf16 GEMMs)");
      std::printf("train_gpt: %s, %zu parameters; %d data-parallel ranks x %d rows x %d tokens x %d micro-batches; "
                  "%s, %s%s\n",
                  f.model.describe().c_str(), trainer.parameters(), world / (f.tp * f.pp),
                  cfg.micro_batch_rows(), f.seq, cfg.micro_batches_per_step(),
                  trainer.model().options().describe().c_str(),
                  compute.c_str(),
                  f.recompute ? ", recompute" : "");
      if (f.tp > 1)
        std::printf("train_gpt: tensor parallel %d%s; %s\n", f.tp, f.sequence_parallel ? " with sequence parallelism" : "",
                    trainer.mesh().describe().c_str());
      if (const PipelineSchedule* sched = trainer.schedule()) {
        std::string stages;
        const auto ranges = split_layers(f.model.layers, f.pp, f.pp_virtual);
        for (std::size_t s = 0; s < ranges.size(); ++s)
          stages += fmt::format("{}stage {}: layers [{}, {})", s ? ", " : "", s, ranges[s].first, ranges[s].last);
        const bool uneven = f.model.layers % (f.pp * f.pp_virtual) != 0;
        std::printf("train_gpt: pipeline %s, %d stages x %d micro-batches of %d rows (%s%s); %s; %s\n",
                    pipeline_schedule_name(sched->kind()), sched->num_stages(), sched->micro_batches(),
                    cfg.micro_batch_rows(), stages.c_str(),
                    uneven ? "; uneven: the earlier stages take the extra layers" : "",
                    f.pp_reshard ? "units reduced and freed after every micro-batch"
                                 : "units reduced once per step, kept gathered between micro-batches",
                    trainer.mesh().describe().c_str());
        if (f.verbose) std::printf("%s\n", sched->to_string().c_str());
      }
      std::printf("train_gpt: data %s (%llu tokens), init %s, backend %s\n", data.path().c_str(),
                  static_cast<unsigned long long>(data.size()), f.init.empty() ? "spec distributions" : f.init.c_str(),
                  device_kind_name(rt.backend()));
      for (const std::string& note : trainer.resume_notes())
        std::printf("train_gpt: WARNING: --resume: %s\n", note.c_str());
      if (f.resume && trainer.resumed_from() >= 0)
        std::printf("train_gpt: resumed from %s/step-%08lld: optimizer step %lld, next step %d (%.1f MB read on "
                    "rank 0 in %.0f ms)\n",
                    f.checkpoint_dir.c_str(), static_cast<long long>(trainer.checkpointer()->last_load().step),
                    static_cast<long long>(trainer.resumed_from()), trainer.start_step(),
                    static_cast<double>(trainer.checkpointer()->last_load().bytes) / 1e6,
                    trainer.checkpointer()->last_load().ms);
      else if (f.resume)
        std::printf("train_gpt: no committed checkpoint in %s (%s): starting from step 0\n", f.checkpoint_dir.c_str(),
                    trainer.resume_notes().empty() ? "a new directory" : "see the warnings above");
      std::fflush(stdout);
    }
    // Model FLOPs utilisation: every rank's share of the job's model FLOPs against one device's peak, for the dtype of
    // the products (--compute-dtype): the bf16 tensor-core rate for bf16, the f32 one otherwise.
    const gpt::ModelFlops model_flops = gpt::ModelFlops::of(f.model, f.seq);
    std::string peak_source = f.peak_tflops > 0 ? "--peak-tflops" : "";
    const double peak_tflops =
        f.peak_tflops > 0 ? f.peak_tflops : gpt::known_peak_tflops(rt.device().product_name(), cfg.precision.matmul, &peak_source);
    if (rank == 0) {
      std::printf("train_gpt: %.4g model FLOPs per token (6 x %llu parameters + %.4g attention); %s\n",
                  static_cast<double>(model_flops.per_token), static_cast<unsigned long long>(model_flops.params),
                  static_cast<double>(model_flops.attention),
                  peak_tflops > 0 ? fmt::format("MFU against {:.1f} TFLOP/s per device ({})", peak_tflops, peak_source).c_str()
                                  : fmt::format("no MFU: the peak of '{}' is not known (give --peak-tflops)",
                                                rt.device().product_name().empty() ? rt.device().name()
                                                                                   : rt.device().product_name())
                                        .c_str());
      std::fflush(stdout);
    }
    // Achieved model TFLOP/s per device and MFU (NaN without a peak) at `tok_s` tokens/s for the job.
    auto model_tflops = [&](double tok_s) { return tok_s * static_cast<double>(model_flops.per_token) / world / 1e12; };
    auto mfu = [&](double tok_s) { return peak_tflops > 0 ? model_tflops(tok_s) / peak_tflops : std::nan(""); };
    OutputFile metrics;  // every record written through at once: a full disk is an error at that step
    if (rank == 0 && !f.metrics.empty()) metrics = OutputFile(f.metrics, "--metrics");
    const bool bar = rank == 0 && !f.no_progress && isatty(STDERR_FILENO);
    const double tokens_per_step = static_cast<double>(world / (f.tp * f.pp)) * f.batch * f.seq * f.grad_accum;
    const TpTraffic tp_predicted = gpt::predict_tp_traffic(cfg);
    double final_loss = 0, time_sum_ms = 0, exposed_sum_ms = 0, comm_sum_ms = 0;
    gpt::CategoryBytes predicted_step0{}, measured_step0{};  // rank 0, CPU backend: the planner against the ledger
    int timed = 0;
    const int last_step = f.stop_at >= 0 ? std::min(f.stop_at, f.steps) : f.steps;
    // A resume past the end is refused, not run as zero steps that report a checkpoint never written.
    STRATA_CHECK(trainer.start_step() <= f.steps,
                 "--resume: the checkpoint is at step {}, past --steps {}: nothing to train (give --steps {} or more "
                 "to continue it)", trainer.start_step(), f.steps, trainer.start_step() + 1);
    STRATA_CHECK(trainer.start_step() <= last_step, "--resume: the checkpoint is at step {}, past --stop-at {}",
                 trainer.start_step(), f.stop_at);
    if (rank == 0 && trainer.start_step() == last_step && trainer.resumed_from() >= 0) {
      std::printf("train_gpt: nothing to train: the checkpoint is at step %d, where %s ends\n", last_step,
                  last_step == f.steps ? "--steps" : "--stop-at");
      std::fflush(stdout);
    }
    for (int step = trainer.start_step(); step < last_step; ++step) {
      gpt::StepRecord r = trainer.step(step);
      const StepSummary& comm = trainer.model().last_step_summary();
      if (step >= 2) {
        time_sum_ms += r.time_ms;
        exposed_sum_ms += comm.exposed_comm_ms;
        comm_sum_ms += comm.comm_ms;
        ++timed;
      }
      final_loss = r.loss;
      double tok_s = tokens_per_step / (r.time_ms / 1000.0);
      std::size_t peak = rt.device().memory_stats().peak_total();
      if (rank == 0) {
        std::printf("step %d loss %.6f time_ms %.1f tok/s %.0f peak_mem_MiB %.1f grad_norm %.4f comm_ms %.1f "
                    "exposed_comm_ms %.1f tflops %.3g%s%s%s\n",
                    step, r.loss, r.time_ms, tok_s, static_cast<double>(peak) / (1024.0 * 1024.0), r.grad_norm,
                    comm.comm_ms, comm.exposed_comm_ms, model_tflops(tok_s),
                    peak_tflops > 0 ? fmt::format(" mfu {:.1f}%", 100.0 * mfu(tok_s)).c_str() : "",
                    r.skipped ? " skipped" : "",
                    r.checkpoint_ms > 0 ? fmt::format(" checkpoint_ms {:.1f}", r.checkpoint_ms).c_str() : "");
        std::fflush(stdout);
        if (metrics.is_open())
          metrics.write(nlohmann::json{{"step", step},
                                    {"loss", r.loss},
                                    {"time_ms", r.time_ms},
                                    {"tokens_per_s", tok_s},
                                    {"grad_norm", r.grad_norm},
                                    {"checkpoint_ms", r.checkpoint_ms},
                                    {"skipped", r.skipped},
                                    {"loss_scale", r.loss_scale},
                                    {"peak_mem_bytes", peak},
                                    {"comm_ms", comm.comm_ms},
                                    {"exposed_comm_ms", comm.exposed_comm_ms},
                                    {"model_tflops_per_device", model_tflops(tok_s)},
                                    {"mfu", peak_tflops > 0 ? nlohmann::json(mfu(tok_s)) : nlohmann::json()},
                                    {"all_gather_bytes", comm.all_gather_bytes},
                                    {"predicted_all_gather_bytes", comm.predicted_all_gather_bytes},
                                    {"reduce_scatter_bytes", comm.reduce_scatter_bytes},
                                    {"predicted_reduce_scatter_bytes", comm.predicted_reduce_scatter_bytes},
                                    {"all_reduce_bytes", comm.all_reduce_bytes},
                                    {"predicted_all_reduce_bytes", comm.predicted_all_reduce_bytes},
                                    {"tp_bytes", r.tp_traffic.total()},
                                    {"tp_all_reduce_bytes", r.tp_traffic.all_reduce_bytes},
                                    {"tp_all_gather_bytes", r.tp_traffic.all_gather_bytes},
                                    {"tp_reduce_scatter_bytes", r.tp_traffic.reduce_scatter_bytes},
                                    {"predicted_tp_bytes", tp_predicted.total()}}
                            .dump() +
                        "\n");
        if (bar) progress(step + 1, last_step, timed ? time_sum_ms / timed : r.time_ms);
      }
      if (step == 0 && rank == 0 && rt.backend() == DeviceKind::kCpu) {
        // The planner's prediction beside the ledger's measured peak (rank 0), after the first step.
        gpt::CategoryBytes measured{};
        for (std::size_t i = 0; i < kNumMemCategories; ++i)
          measured[i] = rt.device().memory_stats().peak(static_cast<MemCategory>(i)) - before[i];
        predicted_step0 = gpt::predict_step_memory(cfg, world);
        measured_step0 = measured;
        std::printf("memory after step 0, rank 0 (bytes):\n%s",
                    gpt::prediction_table(predicted_step0, measured).c_str());
        if (const Device* host = trainer.model().host_device()) {
          gpt::CategoryBytes host_measured{};
          for (std::size_t i = 0; i < kNumMemCategories; ++i)
            host_measured[i] = host->memory_stats().peak(static_cast<MemCategory>(i));
          std::printf("host memory (offload) after step 0, rank 0 (bytes):\n%s",
                      gpt::prediction_table(gpt::predict_host_memory(cfg, world), host_measured).c_str());
        }
        std::fflush(stdout);
      }
    }
    metrics.close();
    trainer.finish();
    if (rank == 0 && trainer.checkpointer()) {
      // Only what happened: a run that wrote nothing (it resumed at its last step) says so.
      const SaveStats& last = trainer.checkpointer()->last_save();
      if (last.committed)
        std::printf("train_gpt: checkpoint %s/step-%08lld committed (%.1f MB on rank 0, written in %.0f ms)\n",
                    f.checkpoint_dir.c_str(), static_cast<long long>(last.step), static_cast<double>(last.bytes) / 1e6,
                    last.write_ms);
      else
        std::printf("train_gpt: no checkpoint written: %s/step-%08lld, which this run resumed from, is where it "
                    "stands\n", f.checkpoint_dir.c_str(), static_cast<long long>(trainer.resumed_from()));
    }
    if (!f.save.empty()) trainer.save(f.save);

    auto ledger = MemoryLedger::gather(rt.device(), rt.world());
    std::vector<LedgerRow> host_ledger;
    if (Device* host = trainer.model().host_device()) host_ledger = MemoryLedger::gather(*host, rt.world());
    if (rank == 0) {
      auto peaks_of = [](const std::vector<LedgerRow>& rows) {
        nlohmann::json peaks = nlohmann::json::array();
        for (const LedgerRow& row : rows) {
          nlohmann::json p;
          for (std::size_t i = 0; i < kNumMemCategories; ++i)
            if (row.peak[i]) p[mem_category_name(static_cast<MemCategory>(i))] = row.peak[i];
          p["total"] = row.peak_total;
          peaks.push_back({{"rank", row.rank}, {"peak_bytes", p}});
        }
        return peaks;
      };
      const double mean_ms = timed ? time_sum_ms / timed : 0;
      const double mean_tok_s = mean_ms > 0 ? tokens_per_step / (mean_ms / 1000.0) : 0;
      // What the resume did (the step it loaded, or null) and what it warned about; the step this run committed.
      nlohmann::json resume_record;
      if (f.resume)
        resume_record = {{"from_step", trainer.resumed_from() >= 0 ? nlohmann::json(trainer.resumed_from())
                                                                    : nlohmann::json()},
                         {"warnings", trainer.resume_notes()}};
      nlohmann::json saved_step;
      if (trainer.checkpointer() && trainer.checkpointer()->last_save().committed)
        saved_step = trainer.checkpointer()->last_save().step;
      nlohmann::json summary{{"final_loss", final_loss},
                             {"mean_step_ms", mean_ms},
                             {"tokens_per_s", mean_tok_s},
                             {"steps", f.steps},
                             {"mean_exposed_comm_ms", timed ? exposed_sum_ms / timed : 0},
                             {"mean_comm_ms", timed ? comm_sum_ms / timed : 0},
                             {"exposed_comm_fraction", time_sum_ms > 0 ? exposed_sum_ms / time_sum_ms : 0},
                             {"last_step", trainer.model().last_step_summary().describe()},
                             {"flops_per_token", model_flops.per_token},
                             {"model_tflops_per_device", model_tflops(mean_tok_s)},
                             {"peak_tflops", peak_tflops > 0 ? nlohmann::json(peak_tflops) : nlohmann::json()},
                             {"peak_source", peak_source},
                             {"mfu", peak_tflops > 0 && mean_ms > 0 ? nlohmann::json(mfu(mean_tok_s))
                                                                    : nlohmann::json()},
                             {"ranks", world},
                             {"zero_stage", f.zero_stage},
                             {"parameters", trainer.parameters()},
                             {"offload", f.offload},
                             {"resume", resume_record},
                             {"checkpoint",
                              trainer.checkpointer()
                                  ? nlohmann::json{{"step", saved_step},
                                                   {"bytes_rank0", trainer.checkpointer()->last_save().bytes},
                                                   {"write_ms", trainer.checkpointer()->last_save().write_ms},
                                                   {"stall_ms", trainer.checkpointer()->last_save().stall_ms},
                                                   {"load_ms", trainer.checkpointer()->last_load().ms},
                                                   {"load_bytes_rank0", trainer.checkpointer()->last_load().bytes}}
                                  : nlohmann::json()},
                             {"peak_memory", peaks_of(ledger)},
                             {"host_peak_memory", peaks_of(host_ledger)}};
      if (gpt::total(predicted_step0) > 0) {
        // What the trainer itself allocated in step 0 on rank 0, predicted and measured, per category.
        auto categories = [](const gpt::CategoryBytes& b) {
          nlohmann::json j;
          for (std::size_t i = 0; i < kNumMemCategories; ++i)
            if (b[i]) j[mem_category_name(static_cast<MemCategory>(i))] = b[i];
          j["total"] = gpt::total(b);
          return j;
        };
        summary["step0_memory_rank0"] = {{"predicted", categories(predicted_step0)},
                                         {"measured", categories(measured_step0)}};
      }
      std::printf("%s\n", summary.dump().c_str());
    }
    rt.finish();  // the trace, if on: a failed write is an error here, not a log line at exit
    return 0;
  });
}
