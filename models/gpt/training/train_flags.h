// TrainFlags: train_gpt's command line, and what it makes of it: the preset applied, the configuration every rank
// must share, the files checked on every rank, the token data and the TrainConfig.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/gpt/data/token_data.h"
#include "models/gpt/model/gpt_model.h"
#include "models/gpt/training/train_config.h"
#include "runtime/bootstrap/config_agreement.h"
#include "runtime/bootstrap/runtime.h"

namespace strata::gpt {

struct TrainFlags {
  GptConfig model;
  int seq = 8, batch = 4, steps = 20, grad_accum = 1, zero_stage = 3, dp_replicate = 1, tp = 1;
  int global_batch = 0;  // --global-batch: 0 is off (the rows per step follow the world)
  int cp = 1;            // --cp: context parallelism
  double lr = 1e-3, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, grad_clip = 1.0;
  std::uint64_t seed = 1, tokens = 1 << 16;
  std::string save_hf;           // --save-hf: the final weights as a Hugging Face model directory
  std::string save_shard_size = "5GB";
  std::string init_dir;          // the Hugging Face model directory --init named (its tokenizer files go to --save-hf)
  std::string init, save, data, text, make_data, metrics, backend, param_dtype = "f32", reduce_dtype = "f32",
                                                                   compute_dtype = "auto";
  bool no_progress = false, sequence_parallel = false;
  std::string recompute = "none";  // given without a value: "full"
  int recompute_every = 1;
  int prefetch = 1, warmup = 0;
  bool cosine = false;
  std::string lr_schedule = "constant";
  bool shuffle = false;
  std::string val_data;          // --val-data: held-out tokens, evaluated every --eval-every steps and at the end
  std::string val_text;          // --val-text: held-out bytes beside --text
  int eval_every = 0, eval_steps = 20;
  double min_lr = -1, decay_fraction = 0.2;
  std::string trace, offload = "none", device_memory;
  std::string checkpoint_dir;
  int checkpoint_every = 0, keep_checkpoints = 2, stop_at = -1;
  bool checkpoint_async = false, resume = false;
  int max_skipped_steps = 10;
  int pp = 1, pp_virtual = 1, microbatches = 0;
  std::string pp_schedule = "1f1b", dp_shard;
  bool pp_reshard = false, verbose = false;
  std::string model_name;  // --model: a preset's shape; explicit shape flags override it
  std::string family = "gpt2";  // --family; the Llama-style shape flags set model's fields directly
  double peak_tflops = 0;  // --peak-tflops: the MFU denominator per device (0: from the device's name)

  // The last step this run trains to: --steps, or --stop-at when it comes first.
  int last_step() const { return stop_at >= 0 ? std::min(stop_at, steps) : steps; }
};

// Every flag of train_gpt, bound to `f` (later flags override earlier ones).
void add_train_flags(CLI::App& app, TrainFlags& f);
// The preset's shape for every shape flag not given on the command line (explicit flags win, as later flags do); with
// --init naming a Hugging Face model directory, its config.json's shape, and --init becomes its model.safetensors.
// Returns the vocabulary synthetic tokens are drawn from: the preset's tokenizer's (GPT-2's 50257, not the padded
// rows) unless --vocab was given.
int apply_preset(const CLI::App& app, TrainFlags& f);
// --global-batch G on a world of `world` ranks: --grad-accum (or, under a pipeline, --batch) from G, so that a step
// trains G rows at any world size; an error on every rank where G does not split into the layout's micro-batches or
// contradicts a --grad-accum / --batch given with it. Nothing without --global-batch.
void apply_global_batch(const CLI::App& app, TrainFlags& f, int world);
// The whole effective configuration, which every rank must share (strata::check_config_agreement). Display-only
// flags (--no-progress) are left out; no flag of train_gpt may legitimately differ per rank.
std::vector<ConfigField> effective_configuration(const TrainFlags& f);
// Collective: every file the run reads or writes, checked on each rank that uses it, and agreed: a bad path stops
// every rank before the first step, not after the steps (the trace is checked in the Runtime).
void check_run_files(const TrainFlags& f, Runtime& rt);
// The run's tokens: --text, --data, or the spec's synthetic ones drawn from `data_vocab` values.
TokenFile open_tokens(const TrainFlags& f, int data_vocab);
// --val-data's tokens (checked against the vocabulary, at least one window of --seq + 1), or none.
std::optional<TokenFile> open_val_tokens(const TrainFlags& f);
// The TrainConfig of the flags on this job (--dp-shard node reads the node map); validated by GptTrainer.
TrainConfig train_config(const TrainFlags& f, Runtime& rt);

}  // namespace strata::gpt
