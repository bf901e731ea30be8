// train_gpt's flags: their definitions, the preset, the configuration the ranks agree on, the files, the TrainConfig.
#include "models/gpt/training/train_flags.h"

#include <strata/flag_checks.h>  // CLI11 validators (installed; not in strata.h, which needs no CLI11)

#include <algorithm>
#include <filesystem>
#include <limits>

#include "collectives/rank_values.h"
#include "core/env.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "models/gpt/model/llama_shape_flags.h"
#include "models/gpt/training/gpt_presets.h"
#include "models/hf/hf_config.h"
#include "runtime/checkpoint/storage_view.h"
#include "runtime/parallel/node_layout.h"

namespace strata::gpt {

namespace {

// The model's shape (a preset, or each dimension) and the rows of a step.
void add_model_flags(CLI::App& app, TrainFlags& f) {
  std::string presets;
  for (const GptPreset& p : gpt_presets()) {
    const GptConfig& m = p.model;
    presets += presets.empty() ? "" : "; ";
    if (m.llama())
      presets += fmt::format("{} (--family llama: {} layers, {} heads over {} key-value heads, width {}, MLP {}, "
                             "vocabulary {}, sequence {})",
                             p.name, m.layers, m.heads, m.kv(), m.embd, m.mlp_width(), m.vocab, p.seq);
    else
      presets += fmt::format("{} ({} layers, {} heads, width {}, vocabulary {} padded to {}, sequence {})", p.name,
                             m.layers, m.heads, m.embd, p.vocab_tokens, m.vocab, p.seq);
  }
  app.add_option("--model", f.model_name,
                 "a named model shape: " + presets +
                     ". --layers, --heads, --embd, --vocab, --ctx and --seq given as well "
                     "override it");
  app.add_option("--peak-tflops", f.peak_tflops,
                 "peak TFLOP/s of one device for the MFU figure (default: known for H100, H200 and A100 from the "
                 "device's name; none on the CPU)")
      ->check(flags::positive_real());
  app.add_option("--layers", f.model.layers, "transformer blocks")->check(flags::positive_integer());
  app.add_option("--heads", f.model.heads, "attention heads")->check(flags::positive_integer());
  app.add_option("--embd", f.model.embd, "embedding width C (a multiple of --heads)")->check(flags::positive_integer());
  app.add_option("--vocab", f.model.vocab, "vocabulary size (256 with --text; above 65536 the data needs uint32 "
                 "shards)")->check(flags::integer(2, std::numeric_limits<int>::max()));
  app.add_option("--ctx", f.model.ctx, "positions in wpe (the rotary table's, --family llama)")
      ->check(flags::positive_integer());
  app.add_option("--family", f.family,
                 "gpt2 (LayerNorm, learned positions, GELU MLP of 4 x --embd, tied head), or llama (Hugging Face's "
                 "LlamaForCausalLM: RMSNorm, rotary positions, SwiGLU MLP of --ffn, grouped-query attention; "
                 "docs/llama-model.md)")
      ->check(CLI::IsMember({"gpt2", "llama"}));
  add_llama_shape_flags(app, f.model);
  app.add_option("--seq", f.seq, "sequence length T (<= --ctx)")->check(flags::positive_integer());
  app.add_option("--batch", f.batch,
                 "rows per data-parallel rank per micro-batch (with --microbatches or --pp: per step, split into the "
                 "micro-batches)")
      ->check(flags::positive_integer());
  app.add_option("--global-batch", f.global_batch,
                 "rows per optimizer step over all data-parallel ranks, kept whatever the world: sets --grad-accum to "
                 "G / (dp x --batch), or under a pipeline --batch to G / dp (a restart on fewer hosts trains the same "
                 "steps)")
      ->check(flags::positive_integer());
}

// The steps, the learning-rate schedule, AdamW and clipping.
void add_optimizer_flags(CLI::App& app, TrainFlags& f) {
  app.add_option("--steps", f.steps, "optimizer steps")->check(flags::non_negative_integer());
  app.add_option("--lr", f.lr, "peak learning rate (constant unless --warmup / --lr-schedule)")
      ->check(flags::non_negative_real());
  app.add_option("--warmup", f.warmup, "linear learning-rate warmup over this many steps")
      ->check(flags::non_negative_integer());
  app.add_option("--lr-schedule", f.lr_schedule,
                 "after the warmup: constant, cosine or linear decay to --min-lr at --steps, or wsd (warmup-stable-"
                 "decay: constant, then a linear decay over the last --decay-fraction of the steps)")
      ->check(CLI::IsMember({"constant", "cosine", "linear", "wsd"}));
  app.add_flag("--cosine", f.cosine, "the same as --lr-schedule cosine");
  app.add_option("--min-lr", f.min_lr, "the learning rate a decay ends at (default: --lr / 10)")
      ->check(flags::non_negative_real());
  app.add_option("--decay-fraction", f.decay_fraction,
                 "--lr-schedule wsd: the share of the steps after the warmup that decay (default 0.2)")
      ->check(flags::real(0.0, true, 1.0, false));
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
}

// The initial weights, the tokens and the final weights.
void add_data_flags(CLI::App& app, TrainFlags& f) {
  app.add_option("--seed", f.seed, "seed of the init (without --init) and of --make-data")
      ->check(flags::unsigned_integer());
  app.add_option("--init", f.init,
                 "initial weights: a safetensors file (the spec's names, or with --family llama Strata's or Hugging "
                 "Face's), or a Hugging Face model directory (config.json and model.safetensors: the shape too)")
      ->check(CLI::ExistingPath);
  app.add_option("--save", f.save, "write the final weights here (safetensors, F32)")->check(flags::path_name());
  app.add_option("--save-hf", f.save_hf,
                 "write the final weights as a new Hugging Face model directory here: config.json, safetensors "
                 "shards with their index (F32), and the tokenizer files of the --init directory")
      ->check(flags::path_name());
  app.add_option("--save-shard-size", f.save_shard_size, "with --save-hf: the most tensor bytes in a shard (5GB)");
  auto* data = app.add_option("--data", f.data,
                              "training tokens: a file, a glob or a comma-separated list of token shards (Strata's, "
                              "llm.c's .bin or plain uint16 as nanoGPT's), memory-mapped")
                   ->check(flags::path_name());
  auto* text = app.add_option("--text", f.text, "train a byte-level model (vocab 256) on this text file")
                   ->check(CLI::ExistingFile);
  data->excludes(text);
  app.add_option("--val-data", f.val_data,
                 "held-out tokens (shards as --data takes them): the validation loss over --eval-steps batches, "
                 "every --eval-every steps and after the last")
      ->check(flags::path_name());
  auto* val_text = app.add_option("--val-text", f.val_text,
                                  "held-out text beside --text (its bytes, vocab 256): the validation loss as --val-data")
                       ->check(CLI::ExistingFile);
  val_text->needs(text);
  app.add_flag("--shuffle", f.shuffle,
               "read the training windows in a seeded order per epoch (from --seed) instead of walking the data");
  app.add_option("--eval-every", f.eval_every, "evaluate --val-data every this many steps (0: after the last only)")
      ->check(flags::non_negative_integer());
  app.add_option("--eval-steps", f.eval_steps,
                 "batches of the validation loss, each the rows of one training step, the same ones every time "
                 "(default 20)")
      ->check(flags::positive_integer());
  app.add_option("--make-data", f.make_data, "write the spec's synthetic tokens to this file and exit")
      ->check(flags::path_name());
  app.add_option("--tokens", f.tokens, "number of synthetic tokens (with --make-data, or without --data)")
      ->check(flags::unsigned_integer(1));
}

// Sharding, tensor and pipeline parallelism, precision and recomputation.
void add_layout_flags(CLI::App& app, TrainFlags& f) {
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
  app.add_option("--cp", f.cp,
                 "context parallelism: each row's sequence split over this many ranks in mirrored chunks, attention "
                 "by ring (docs/context-parallel.md; CPU backend; not with --sequence-parallel)")
      ->check(flags::positive_integer());
  app.add_flag("--sequence-parallel", f.sequence_parallel,
               "with --tp: LayerNorm and residual regions hold seq / tp positions per rank");
  app.add_option(
         "--pp", f.pp,
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
  flags::recompute_option(
      app, f.recompute,
      "what each block keeps for its backward: none; full (alone: keep only the block's input and run it "
      "again in backward); attention (recompute the attention core); mlp (recompute the GELU); offload (its "
      "activations in host memory, prefetched back); a comma-separated kind per block; or auto (with "
      "--device-memory: the least extra compute that fits, chosen per block); default none");
  app.add_option("--recompute-every", f.recompute_every,
                 "apply --recompute's kind to every K-th block only (blocks K, 2K, ... counting from 1)")
      ->check(flags::positive_integer());
}

// The device, the run's outputs (metrics, trace, checkpoints), offload and the memory budget.
void add_run_flags(CLI::App& app, TrainFlags& f) {
  app.add_option("--backend", f.backend,
                 "auto (the default, from STRATA_BACKEND): CUDA when every rank on a node has its own GPU, else cpu; "
                 "or cpu, cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--metrics", f.metrics, "write one JSON record per step to this file")->check(flags::path_name());
  app.add_option("--prefetch", f.prefetch, "units gathered ahead (0: no prefetch)")->check(flags::integer(0, 8));
  app.add_option("--trace", f.trace, "write a Chrome trace / Perfetto JSON of all ranks here (as STRATA_TRACE)")
      ->check(flags::path_name());
  app.add_flag("--no-progress", f.no_progress, "no progress bar on a terminal");
  app.add_option("--offload", f.offload,
                 "optimizer state (and parameter shards) in host memory: none, optimizer or "
                 "optimizer+params (ZeRO-3)")
      ->check(CLI::IsMember({"none", "optimizer", "optimizer+params"}));
  app.add_option("--checkpoint-dir", f.checkpoint_dir,
                 "sharded checkpoints here (docs/checkpoint.md); one after the last step, and with --checkpoint-every")
      ->check(flags::path_name());
  app.add_option("--checkpoint-every", f.checkpoint_every, "also checkpoint every N steps")
      ->check(flags::non_negative_integer());
  app.add_flag("--checkpoint-async", f.checkpoint_async, "write checkpoints in the background while training goes on");
  app.add_option("--keep-checkpoints", f.keep_checkpoints, "committed checkpoints to keep (older ones go)")
      ->check(flags::positive_integer());
  app.add_option("--stop-at", f.stop_at,
                 "stop after this many steps of the --steps schedule, as a job whose time runs out (a checkpoint is "
                 "written there); --resume continues")
      ->check(flags::non_negative_integer());
  app.add_flag("--resume", f.resume,
               "continue from the latest committed checkpoint in --checkpoint-dir (without one, "
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

}  // namespace

void add_train_flags(CLI::App& app, TrainFlags& f) {
  add_model_flags(app, f);
  add_optimizer_flags(app, f);
  add_data_flags(app, f);
  add_layout_flags(app, f);
  add_run_flags(app, f);
}

namespace {

// The shape of `model` into the flags not given on the command line (a preset's, or a model directory's).
void take_shape(const CLI::App& app, TrainFlags& f, const GptConfig& model) {
  auto unset = [&](const char* flag) { return app.get_option(flag)->count() == 0; };
  if (unset("--layers")) f.model.layers = model.layers;
  if (unset("--heads")) f.model.heads = model.heads;
  if (unset("--embd")) f.model.embd = model.embd;
  if (unset("--vocab")) f.model.vocab = model.vocab;
  if (unset("--ctx")) f.model.ctx = model.ctx;
  if (!model.llama()) return;
  if (unset("--family")) f.family = family_name(model.family);
  if (unset("--kv-heads")) f.model.kv_heads = model.kv_heads;
  if (unset("--head-dim")) f.model.head_dim = model.head_dim;
  if (unset("--ffn")) f.model.ffn = model.ffn;
  if (unset("--rope-theta")) f.model.rope_theta = model.rope_theta;
  if (unset("--norm-eps")) f.model.norm_eps = model.norm_eps;
  if (unset("--untied")) f.model.tied = model.tied;
  if (unset("--qkv-bias")) f.model.qkv_bias = model.qkv_bias;
  f.model.rope_scaling = model.rope_scaling;
}

}  // namespace

int apply_preset(const CLI::App& app, TrainFlags& f) {
  if (!f.init.empty() && std::filesystem::is_directory(f.init)) {
    // A Hugging Face model directory: its config.json is the family and the shape (flags given as well override
    // it), its model.safetensors, or the shards its model.safetensors.index.json names, the initial weights.
    STRATA_CHECK(f.model_name.empty(), "--model {} and --init {} (a model directory) both give the shape: drop one",
                 f.model_name, f.init);
    const hf::HfConfig c = hf::read_hf_config(f.init, f.seq);
    take_shape(
        app, f,
        c.gpt2 ? GptConfig(c.gpt.layers, c.gpt.heads, c.gpt.hidden, c.gpt.vocab, c.gpt.ctx) : llama_model(c.llama));
    f.init_dir = f.init;
    const std::string index = f.init + "/model.safetensors.index.json";
    f.init = std::filesystem::exists(index) ? index : f.init + "/model.safetensors";  // as SafetensorsReader opens it
    return f.model.vocab;
  }
  if (f.model_name.empty()) return f.model.vocab;
  const GptPreset& p = find_gpt_preset(f.model_name);
  take_shape(app, f, p.model);
  if (app.get_option("--seq")->count() == 0) f.seq = p.seq;
  return app.get_option("--vocab")->count() == 0 ? p.vocab_tokens : f.model.vocab;
}

void apply_global_batch(const CLI::App& app, TrainFlags& f, int world) {
  if (f.global_batch == 0) return;
  const int G = f.global_batch, model_ranks = f.tp * f.pp * f.cp;
  // A world the layout does not divide is the mesh's error, named there.
  if (model_ranks < 1 || world % model_ranks != 0) return;
  const int dp = world / model_ranks;
  const bool pipelined = f.pp > 1 || f.microbatches > 1;
  const auto given = [&](const char* flag) { return app.get_option(flag)->count() > 0; };
  STRATA_CHECK(G % dp == 0,
               "--global-batch {} is not a whole number of rows for each of the {} data-parallel ranks ({} ranks / "
               "(--tp {} x --pp {} x --cp {})): give a multiple of {}",
               G, dp, world, f.tp, f.pp, f.cp, dp);
  if (pipelined) {
    STRATA_CHECK(!given("--batch") || f.batch == G / dp,
                 "--global-batch {} sets --batch to {} under a pipeline (the step's rows per data-parallel rank, {} "
                 "ranks): drop --batch {}",
                 G, G / dp, dp, f.batch);
    f.batch = G / dp;
    return;
  }
  STRATA_CHECK((G / dp) % f.batch == 0,
               "--global-batch {} over {} data-parallel ranks is {} rows each, not a whole number of micro-batches of "
               "--batch {}: give a --batch that divides {}",
               G, dp, G / dp, f.batch, G / dp);
  const int accum = G / dp / f.batch;
  STRATA_CHECK(!given("--grad-accum") || f.grad_accum == accum,
               "--global-batch {} sets --grad-accum to {} ({} data-parallel ranks x --batch {}): drop --grad-accum {}",
               G, accum, dp, f.batch, f.grad_accum);
  f.grad_accum = accum;
}

std::vector<ConfigField> effective_configuration(const TrainFlags& f) {
  auto num = [](auto v) { return fmt::format("{}", v); };
  auto on = [](bool b) { return std::string(b ? "on" : "off"); };
  std::vector<strata::ConfigField> c = {{"program", "train_gpt"},
                                        {"--model", f.model_name},
                                        {"--peak-tflops", num(f.peak_tflops)},
                                        {"--layers", num(f.model.layers)},
                                        {"--heads", num(f.model.heads)},
                                        {"--embd", num(f.model.embd)},
                                        {"--vocab", num(f.model.vocab)},
                                        {"--ctx", num(f.model.ctx)},
                                        {"--family", f.family},
                                        {"--kv-heads", num(f.model.kv_heads)},
                                        {"--head-dim", num(f.model.head_dim)},
                                        {"--ffn", num(f.model.ffn)},
                                        {"--rope-theta", num(f.model.rope_theta)},
                                        {"--norm-eps", num(f.model.norm_eps)},
                                        {"--untied", on(!f.model.tied)},
                                        {"--qkv-bias", on(f.model.qkv_bias)},
                                        {"--seq", num(f.seq)},
                                        {"--batch", num(f.batch)},
                                        {"--grad-accum", num(f.grad_accum)},
                                        {"--global-batch", num(f.global_batch)},
                                        {"--steps", num(f.steps)},
                                        {"--stop-at", num(f.stop_at)},
                                        {"--lr", num(f.lr)},
                                        {"--warmup", num(f.warmup)},
                                        {"--cosine", on(f.cosine)},
                                        {"--lr-schedule", f.lr_schedule},
                                        {"--val-data", f.val_data},
                                        {"--val-text", f.val_text},
                                        {"--eval-every", num(f.eval_every)},
                                        {"--eval-steps", num(f.eval_steps)},
                                        {"--min-lr", num(f.min_lr)},
                                        {"--decay-fraction", num(f.decay_fraction)},
                                        {"--weight-decay", num(f.weight_decay)},
                                        {"--beta1", num(f.beta1)},
                                        {"--beta2", num(f.beta2)},
                                        {"--eps", num(f.eps)},
                                        {"--grad-clip", num(f.grad_clip)},
                                        {"--seed", num(f.seed)},
                                        {"--shuffle", on(f.shuffle)},
                                        {"--max-skipped-steps", num(f.max_skipped_steps)},
                                        {"--param-dtype", f.param_dtype},
                                        {"--compute-dtype", f.compute_dtype},
                                        {"--reduce-dtype", f.reduce_dtype},
                                        {"--zero-stage", num(f.zero_stage)},
                                        {"--tp", num(f.tp)},
                                        {"--sequence-parallel", on(f.sequence_parallel)},
                                        {"--cp", num(f.cp)},
                                        {"--pp", num(f.pp)},
                                        {"--pp-schedule", f.pp_schedule},
                                        {"--pp-virtual", num(f.pp_virtual)},
                                        {"--microbatches", num(f.microbatches)},
                                        {"--pp-reshard", on(f.pp_reshard)},
                                        {"--dp-replicate", num(f.dp_replicate)},
                                        {"--dp-shard", f.dp_shard},
                                        {"--prefetch", num(f.prefetch)},
                                        {"--offload", f.offload},
                                        {"--recompute", f.recompute},
                                        {"--recompute-every", num(f.recompute_every)},
                                        {"--init", f.init},
                                        {"--init size", f.init.empty() ? "" : file_size_text(f.init)},
                                        {"--data", f.data},
                                        {"--data size", f.data.empty() ? "" : file_size_text(f.data)},
                                        {"--text", f.text},
                                        {"--text size", f.text.empty() ? "" : file_size_text(f.text)},
                                        {"--tokens", f.data.empty() && f.text.empty() ? num(f.tokens) : ""},
                                        {"--checkpoint-dir", f.checkpoint_dir},
                                        {"--checkpoint-every", num(f.checkpoint_every)},
                                        {"--keep-checkpoints", num(f.keep_checkpoints)},
                                        {"--checkpoint-async", on(f.checkpoint_async)},
                                        {"--resume", on(f.resume)},
                                        {"--save", f.save},
                                        {"--save-hf", f.save_hf},
                                        {"--save-shard-size", f.save_shard_size},
                                        {"--metrics", f.metrics},
                                        {"--trace", f.trace},
                                        {"--backend", f.backend},
                                        {"--device-memory", f.device_memory}};
  return c;
}

void check_run_files(const TrainFlags& f, Runtime& rt) {
  std::string problem;
  try {
    if (!f.init.empty()) check_input_file(f.init, "--init");
    for (const std::string& file : f.data.empty() ? std::vector<std::string>{} : expand_shard_paths(f.data))
      check_input_file(file, "--data");
    if (!f.text.empty()) check_input_file(f.text, "--text");
    if (!f.val_text.empty()) check_input_file(f.val_text, "--val-text");
    for (const std::string& file : f.val_data.empty() ? std::vector<std::string>{} : expand_shard_paths(f.val_data))
      check_input_file(file, "--val-data");
    // The checkpoint directory first: it is created now, as the run would, which may make --save's directory.
    if (!f.checkpoint_dir.empty()) prepare_output_dir(f.checkpoint_dir, "--checkpoint-dir");
    if (!f.save.empty()) check_output_file(f.save, "--save", OutputKind::kReplaced);  // every rank writes its part
    if (!f.save_hf.empty()) {
      std::error_code ec;
      STRATA_CHECK_CODE(ErrorCode::kIo, !std::filesystem::exists(f.save_hf, ec), "--save-hf {} exists already: a "
                        "model directory is written to a new path (nothing there is replaced)", f.save_hf);
      STRATA_CHECK(parse_bytes(f.save_shard_size, "--save-shard-size") > 0, "--save-shard-size {} must be more than "
                   "0 bytes", f.save_shard_size);
    }
    if (rt.rank() == 0 && !f.metrics.empty()) check_output_file(f.metrics, "--metrics", OutputKind::kDirect);
  } catch (const Error& e) {
    problem = e.what();
  }
  all_agree(rt.world(), problem.empty(), problem, "checking the files of the run");
  for (const auto& [flag, out] : {std::pair<const char*, std::string>{"--save", f.save}, {"--save-hf", f.save_hf}}) {
    if (out.empty()) continue;
    // Every rank writes its part into the one file: the ranks must see the same directory.
    const std::string dir = std::filesystem::absolute(out).parent_path().string();
    const StorageView view = probe_storage(rt.world(), dir);
    STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, view.shared(),
                      "{} {}: {} in {} (each host has a disk of its own), and {} writes one file that every "
                      "rank writes its part of: give a path on a file system every rank sees, or save checkpoints "
                      "(--checkpoint-dir) and export one on a single host (strata-ckpt assemble, then strata-ckpt "
                      "export)",
                      flag, out, view.describe(), dir, flag);
  }
}

std::optional<TokenFile> open_val_tokens(const TrainFlags& f) {
  STRATA_CHECK(f.val_text.empty() || f.val_data.empty(), "--val-text {} and --val-data {}: give one validation set",
               f.val_text, f.val_data);
  if (!f.val_text.empty()) return TokenFile::from_text(f.val_text, f.seq);
  if (f.val_data.empty()) return std::nullopt;
  STRATA_CHECK(f.text.empty(), "--val-data {} holds tokens; --text trains on bytes: give one kind of data",
               f.val_data);
  return TokenFile::open(f.val_data, f.seq, f.model.vocab);
}

TokenFile open_tokens(const TrainFlags& f, int data_vocab) {
  const int vocab = f.text.empty() ? f.model.vocab : 256;
  if (!f.text.empty()) return TokenFile::from_text(f.text, f.seq);
  if (!f.data.empty()) return TokenFile::open(f.data, f.seq, vocab);
  return TokenFile::from_tokens(synthetic_tokens(f.tokens, data_vocab, f.seed), f.seq, vocab, "<synthetic>");
}

TrainConfig train_config(const TrainFlags& f, Runtime& rt) {
  TrainConfig cfg;
  cfg.model = f.model;
  cfg.model.family = parse_family(f.family);
  if (!f.text.empty()) cfg.model.vocab = 256;  // bytes
  cfg.seq = f.seq;
  cfg.batch = f.batch;
  cfg.grad_accum = f.grad_accum;
  cfg.adamw = AdamWConfig{f.lr, f.beta1, f.beta2, f.eps, f.weight_decay};
  cfg.shuffle = f.shuffle;
  cfg.warmup_steps = f.warmup;
  STRATA_CHECK(!f.cosine || f.lr_schedule == "constant" || f.lr_schedule == "cosine",
               "--cosine and --lr-schedule {} ask for two schedules: give one", f.lr_schedule);
  cfg.lr_decay = f.cosine ? LrDecay::kCosine : parse_lr_decay(f.lr_schedule);
  cfg.decay_steps = f.steps;
  cfg.min_lr = f.min_lr;
  cfg.decay_fraction = f.decay_fraction;
  cfg.lr_schedule().validate();
  cfg.optimizer.grad_clip = f.grad_clip;
  cfg.optimizer.max_skipped_steps = f.max_skipped_steps;
  cfg.sharding.stage = zero_stage_from_int(f.zero_stage);
  cfg.sharding.mixed_precision = {parse_dtype(f.param_dtype), parse_dtype(f.reduce_dtype)};
  cfg.sharding.prefetch_depth = f.prefetch;
  cfg.sharding.offload = offload_from_name(f.offload);
  cfg.optimizer.dynamic_loss_scale = cfg.sharding.mixed_precision.param_dtype == DType::kF16;
  cfg.precision.matmul =
      f.compute_dtype == "auto" ? (f.param_dtype == "bf16" ? DType::kBF16 : DType::kF32) : parse_dtype(f.compute_dtype);
  cfg.dp_replicate = f.dp_replicate;
  if (f.dp_shard == "node") {
    STRATA_CHECK(f.dp_replicate == 1, "--dp-shard node sets the replicas (one per node); drop --dp-replicate {}",
                 f.dp_replicate);
    cfg.dp_replicate = node_aligned_dims(rt.node_of_rank(), f.pp, f.tp).dp_replicate;
  }
  // The library runs sequence parallelism at tp 1 too (the tensor-parallel data flow on one rank, the tests' oracle);
  // train_gpt asks for a real split.
  STRATA_CHECK(!f.sequence_parallel || f.tp > 1, "--sequence-parallel needs --tp 2 or more");
  cfg.tp = f.tp;
  cfg.sequence_parallel = f.sequence_parallel;
  cfg.cp = f.cp;
  cfg.pp = f.pp;
  cfg.pp_schedule = parse_pipeline_schedule(f.pp_schedule);
  cfg.pp_virtual = f.pp_virtual;
  cfg.microbatches = f.microbatches;
  cfg.pp_keep_gathered = !f.pp_reshard;
  cfg.recompute = RecomputePolicy::parse(f.recompute, f.recompute_every);
  STRATA_CHECK(f.recompute_every <= std::max(1, f.model.layers) || f.recompute == "none",
               "--recompute-every {} is above the model's {} blocks: no block would be recomputed (blocks K, 2K, ... "
               "counting from 1); give at most {}", f.recompute_every, f.model.layers, f.model.layers);
  STRATA_CHECK(!cfg.recompute.automatic || !f.device_memory.empty() || env().device_memory > 0,
               "--recompute auto chooses from the device budget: give --device-memory or STRATA_DEVICE_MEMORY (or use "
               "none, mlp, attention, full or offload)");
  cfg.init = f.init;
  cfg.seed = f.seed;
  cfg.checkpoint.dir = f.checkpoint_dir;
  cfg.checkpoint.keep = f.keep_checkpoints;
  cfg.checkpoint.async = f.checkpoint_async;
  cfg.checkpoint_every = f.checkpoint_every;
  cfg.resume = f.resume;
  return cfg;
}

}  // namespace strata::gpt
