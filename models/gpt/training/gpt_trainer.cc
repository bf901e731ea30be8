// GptTrainer: model construction, initialisation from a file or the spec's distributions, the step, saving.
#include "models/gpt/training/gpt_trainer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <thread>

#include "collectives/rank_values.h"
#include "core/env.h"
#include "core/error.h"
#include "core/fd_io.h"
#include "core/file_checks.h"
#include "core/host_memory.h"
#include "core/logging.h"
#include "core/safetensors.h"
#include "kernels/cpu/threads.h"
#include "models/gpt/model/hf_export.h"
#include "models/gpt/model/hf_llama_weights.h"
#include "models/gpt/model/weight_names.h"
#include "models/gpt/parallel/gpt_parallelize.h"
#include "models/gpt/training/gpt_memory.h"
#include "runtime/context/context_chunks.h"
#include "runtime/optim/nonfinite.h"
#include "runtime/tensor/global_elements.h"

namespace strata::gpt {

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
  check_config();
  if (cfg_.recompute.automatic && cfg_.recompute.per_layer.empty()) choose_recompute();
  // Kernel threads: the node's cores shared among its ranks (oversubscribed OpenMP threads spin against each other).
  cpu::set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / rt_.local_size()));
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, cfg_.cp == 1 || rt_.device().kind() == DeviceKind::kCpu,
                    "--cp {} on {}: ring attention runs on the CPU backend only so far (--backend cpu)", cfg_.cp,
                    rt_.device().name());
  mesh_ = std::make_unique<DeviceMesh>(rt_, MeshDims{cfg_.pp, cfg_.dp_replicate, -1, cfg_.tp, cfg_.cp});
  if (cfg_.cp > 1) chunks_ = ContextChunks::of(cfg_.seq, cfg_.cp, mesh_->cp().rank());
  if (cfg_.pipelined()) build_pipeline();
  parallelize();
  parameters_ = global_numel(gpt_units(cfg_.model, cfg_.tp));
  // Each local element takes the value of its place in the global tensor (init_by_global_index), so the init does
  // not depend on tp; padded vocabulary rows are 0.
  if (!cfg_.init.empty()) {
    init_from_file();
  } else {
    const GptConfig m = cfg_.model;
    const std::uint64_t seed = cfg_.seed;
    model_->init(init_by_global_index(*mesh_, [m, seed](const ParamSlot& s, std::size_t g, std::size_t n, float* o) {
      spec_init(m, s, g, n, o, seed);
    }));
  }
  if (!cfg_.checkpoint.dir.empty()) {
    // A pipeline's checkpoint holds the whole model (it resumes at any pp); the tied copy is the first stage's.
    CheckpointPart whole{gpt_units(cfg_.model, cfg_.tp), {}, cfg_.pp};
    if (part_.holds_tied_copy()) whole.copies.push_back(tied_->unit());
    checkpointer_ = std::make_unique<Checkpointer>(*model_, *optimizer_, *mesh_, cfg_.checkpoint, std::move(whole));
    data_record_ = GptDataRecord::of(data_);  // once: its fingerprint reads up to 64 MiB of tokens
    if (cfg_.resume) resume();
  }
  const int rows = cfg_.micro_batch_rows();
  with_fit_advice([&] {
    GptParallel par;
    par.tp = &mesh_->tp();
    par.sequence_parallel = cfg_.sequence_parallel;
    par.tp_kernels = cfg_.tp_kernels;
    if (cfg_.cp > 1) par.cp = &mesh_->cp();
    gpt_ = std::make_unique<GptModel>(cfg_.model, *model_, rt_.device(), rows, cfg_.local_seq(), cfg_.recompute, par,
                                      part_, cfg_.precision);
  });
  if (executor_)
    stage_ = std::make_unique<GptPipelineStage>(*gpt_, *model_, data_, rows, cfg_.seq, mesh_->dp().size(),
                                                mesh_->dp().rank(), cfg_.pp_keep_gathered, chunks_);
  inputs_.resize(static_cast<std::size_t>(cfg_.batch) * cfg_.local_seq());  // this rank's tokens of each row
  targets_.resize(inputs_.size());
}

std::uint64_t GptTrainer::rows_per_step() const {
  // dp x batch rows per micro-batch; a pipeline's step is one such set (split into its micro-batches), --grad-accum's
  // A of them.
  return static_cast<std::uint64_t>(mesh_->dp().size()) * static_cast<std::uint64_t>(cfg_.batch) *
         static_cast<std::uint64_t>(cfg_.pipelined() ? 1 : cfg_.grad_accum);
}

void GptTrainer::check_config() const {
  cfg_.validate(rt_.world_size());
  STRATA_CHECK(data_.shuffle_seed().has_value() == cfg_.shuffle, "the configuration {} shuffled windows, the data "
               "'{}' {} them (TokenFile::shuffle_windows)", cfg_.shuffle ? "asks for" : "does not ask for",
               data_.path(), data_.shuffle_seed() ? "shuffles" : "does not shuffle");
  STRATA_CHECK(data_.max_token() < static_cast<std::uint32_t>(cfg_.model.vocab),
               "data token {} is outside the vocabulary of {}", data_.max_token(), cfg_.model.vocab);
}

void GptTrainer::choose_recompute() {
  const std::uint64_t budget = rt_.device().memory_budget();
  STRATA_CHECK(budget > 0, "--recompute auto chooses from the device budget: give --device-memory (or "
               "STRATA_DEVICE_MEMORY)");
  const std::vector<double> baselines = all_gather_values(rt_.world(), static_cast<double>(baseline_bytes_));
  const std::uint64_t most = static_cast<std::uint64_t>(*std::max_element(baselines.begin(), baselines.end()));
  std::uint64_t left = budget > most ? budget - most : 0;
  // 1% stays free for what the step's prediction does not hold: the run's own reporting (the summary gathers every
  // rank's ledger on the device) and, on CUDA, the allocator's rounding.
  left -= left / 100;
  std::string error;
  RecomputePolicy chosen = gpt::choose_recompute(cfg_, rt_.world_size(), left, &error);
  STRATA_CHECK_CODE(ErrorCode::kOutOfMemory, !chosen.per_layer.empty(), "{}", error);
  cfg_.recompute = std::move(chosen);
}

void GptTrainer::build_pipeline() {
  const int P = cfg_.pp;
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, P == 1 || cfg_.sharding.offload == OffloadPolicy::kNone ||
                                                 rt_.device().kind() == DeviceKind::kCpu,
                    "--offload {} with --pp {} on {}: the tied embeddings' gradients live in host memory, which "
                    "NCCL cannot reduce; pipelines offload on the CPU backend only", offload_name(cfg_.sharding.offload),
                    P, rt_.device().name());
  schedule_ = std::make_unique<PipelineSchedule>(
      PipelineSchedule::build(cfg_.pp_schedule, P, cfg_.micro_batches(), cfg_.pp_virtual));
  schedule_->validate();
  executor_ = std::make_unique<PipelineExecutor>(*schedule_, mesh_->pp(), PipelineFaults{env().fault_pp_no_send});
}

void GptTrainer::parallelize() {
  const int P = cfg_.pp;
  const GptPlan plan =
      gpt::parallelize(cfg_.model, cfg_.tp, cfg_.sharding, schedule_.get(), mesh_->pp().rank(), cfg_.pp_keep_gathered);
  part_ = plan.part;
  cfg_.sharding = plan.sharding;
  const int tied_unit = P == 1 ? -1 : part_.first ? plan.places.emb : plan.places.head;
  // The norm counts every element of the whole model once: a replicated slot on tp rank 0 only, the tied copy of
  // the embeddings never; the sums over the tp and pp groups join the data-parallel one. The non-finite check travels
  // with it, so all ranks agree.
  for (Communicator* g : model_parallel_norm_groups(*mesh_)) cfg_.optimizer.norm_groups.push_back(g);
  cfg_.optimizer.counted = counted_once(*mesh_, part_.holds_tied_copy() ? tied_unit : -1);
  cfg_.optimizer.counted_runs = counted_runs_once(*mesh_);  // a key-value head several tp ranks hold: on the first
  // The first and last stage of each pipeline (its pp group) hold the token embeddings, which are the LM head (tied;
  // an untied head is the last stage's alone).
  if (P > 1 && cfg_.model.tied)
    tied_ = std::make_unique<TiedParameters>(*mesh_, std::vector<int>{0, P - 1}, tied_unit, "tied_wte");
  with_fit_advice([&] {
    model_ = std::make_unique<ShardedModel>(*mesh_, plan.units, cfg_.sharding);
    optimizer_ = std::make_unique<ShardedAdamW>(*model_, cfg_.adamw, cfg_.optimizer);
  });
  plan.apply(*model_);
}

void GptTrainer::init_from_file() {
  SafetensorsReader reader(cfg_.init);
  // Hugging Face's Llama names and [out, in] layouts (hf_llama_weights.h), or the file holds gpt_units' own.
  std::optional<HfLlamaWeights> hf_llama;
  std::map<std::string, std::pair<int, int>> place;  // parameter -> (unit, slot) on this rank
  for (int u = 0; u < model_->num_units(); ++u) {
    const std::vector<ParamSlot>& slots = model_->layout(u).slots();
    for (std::size_t i = 0; i < slots.size(); ++i) place[slots[i].name] = {u, static_cast<int>(i)};
  }
  if (cfg_.model.llama() && has_hf_llama_names(reader)) {
    hf_llama.emplace(reader, cfg_.model);  // strict names, the config's shapes
  } else {
    std::vector<std::string> names;
    for (const UnitSpec& u : gpt_units(cfg_.model, cfg_.tp))  // the whole model's, whatever part this rank holds
      for (const SlotSpec& s : u.slots) names.push_back(s.name);
    check_weight_names(reader, names, "--init");
    for (int u = 0; u < model_->num_units(); ++u)
      for (const ParamSlot& s : model_->layout(u).slots())
        reader.check_shape(s.name, s.tp.replicated() ? s.shape : s.tp.global_shape);
  }
  // The first non-finite value this rank reads (pieces come in unit, slot order), by its place in the parameter.
  NonFiniteAt bad;
  std::uint64_t held = 0;  // the elements this rank's shards hold, each read from the file once
  double reading_ms = 0;   // of that, inside the reader (the rest: the model's memory and its own init work)
  const std::uint64_t resident = resident_bytes();  // the model's memory so far: what the reads run beside
  const auto read_start = std::chrono::steady_clock::now();
  model_->init(init_by_global_runs(*mesh_, [&](const ParamSlot& s, const std::vector<GlobalRun>& runs, float* out) {
    const auto t0 = std::chrono::steady_clock::now();
    if (hf_llama)
      hf_llama->read(s.name, runs, out);
    else
      for (const GlobalRun& r : runs) reader.read_f32(s.name, r.global, r.count, out + r.local);  // its shard only
    reading_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (const GlobalRun& r : runs) {
      held += r.count;
      for (std::size_t i = 0; i < r.count && !bad.found(); ++i)
        if (!std::isfinite(out[r.local + i]))
          bad = NonFiniteAt{place.at(s.name).first, place.at(s.name).second, r.global + i, out[r.local + i]};
    }
  }));
  // What each rank read of the file against what it holds: only its own shards' bytes (docs/model-directories.md).
  const double read_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - read_start).count();
  const std::vector<double> read = all_gather_values(rt_.world(), static_cast<double>(reader.bytes_read()));
  const std::vector<double> holds = all_gather_values(rt_.world(), static_cast<double>(held));
  const std::vector<double> times = all_gather_values(rt_.world(), read_ms);
  const std::vector<double> reading = all_gather_values(rt_.world(), reading_ms);
  const std::vector<double> residents = all_gather_values(rt_.world(), static_cast<double>(resident));
  std::string per_rank, beside;
  for (std::size_t r = 0; r < read.size(); ++r) {
    per_rank += fmt::format("{}{:.0f} bytes for {:.0f} elements in {:.1f} ms ({:.1f} ms reading)", r ? ", " : "",
                            read[r], holds[r], times[r], reading[r]);
    beside += fmt::format("{}{:.0f}", r ? ", " : "", residents[r]);
  }
  logger("gpt").info(
      "--init {}: {} file(s); per rank, bytes read and elements held: {}; resident before reading: {} "
      "bytes",
      cfg_.init, reader.file_count(), per_rank, beside);
  bad = lowest_over_ranks(rt_.world(), bad);
  if (bad.found()) {
    const std::string name = model_->layout(bad.unit).slots()[static_cast<std::size_t>(bad.slot)].name;
    STRATA_THROW(ErrorCode::kNonFinite, "--init {}: tensor '{}' holds {} at element {} (the first non-finite "
                 "value of the file's parameters); initial weights must be finite", cfg_.init, name,
                 std::isnan(bad.value) ? "NaN" : bad.value > 0 ? "inf" : "-inf", bad.element);
  }
}

GptTrainer::~GptTrainer() = default;

StepRecord GptTrainer::step(int step) {
  auto t0 = std::chrono::steady_clock::now();
  const int A = cfg_.grad_accum;
  const int dp = mesh_->dp().size(), dp_rank = mesh_->dp().rank();
  double loss = 0, data_ms = 0;
  gpt_->reset_tp_traffic();
  const std::uint64_t cp_before = gpt_->cp_bytes_sent();
  const std::uint64_t rows_per_micro_batch = static_cast<std::uint64_t>(dp) * static_cast<std::uint64_t>(cfg_.batch);
  if (executor_) {
    // The step's rows (dp x batch, in micro-batches) through the schedule; the loss lives on the last stage.
    const int M = cfg_.micro_batches();
    stage_->begin_step(rows_done_, optimizer_->loss_scale() / static_cast<float>(M));
    with_fit_advice([&] { executor_->run_step(*stage_); });
    loss = part_.last ? stage_->loss_sum() / M : 0.0;
    data_ms = stage_->data_ms();
    if (tied_) tied_->sum_grads(model_->parameters());
  } else {
    for (int a = 0; a < A; ++a) {
      model_->set_is_last_backward(a == A - 1);  // finish the reductions after the last micro-batch's backward
      // The global rows of this micro-batch, this rank's share (the window rule of fill_batch, from the data position).
      const std::uint64_t first = rows_done_ + static_cast<std::uint64_t>(a) * rows_per_micro_batch +
                                  static_cast<std::uint64_t>(dp_rank) * static_cast<std::uint64_t>(cfg_.batch);
      const auto d0 = std::chrono::steady_clock::now();
      if (chunks_)
        fill_chunk_rows(data_, first, cfg_.batch, *chunks_, inputs_.data(), targets_.data());
      else
        fill_rows(data_, first, cfg_.batch, cfg_.seq, inputs_.data(), targets_.data());
      data_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - d0).count();
      with_fit_advice([&] {
        loss += gpt_->forward_backward(inputs_.data(), targets_.data(),
                                       optimizer_->loss_scale() / static_cast<float>(A)) / A;
      });
    }
  }
  const double lr = cfg_.lr_at(step);
  StepResult r = optimizer_->step(lr, step);
  rows_done_ += rows_per_step();
  next_step_ = step + 1;
  StepRecord rec;
  rec.step = step;
  rec.lr = lr;
  rec.data_ms = data_ms;
  // The mean over the data-parallel ranks (the tp ranks of a group hold the same loss), which the last stage of a
  // pipeline holds and hands to the others along its pp group (they add 0).
  // Under --cp each rank's loss is the mean over its chunks (the same number of tokens on every rank): the step's is
  // the mean over dp x cp.
  rec.loss = sum_over_ranks(mesh_->pp(), sum_over_ranks(mesh_->dp_cp(), loss) / mesh_->dp_cp().size());
  if (checkpointer_) {
    checkpointer_->poll();
    if (cfg_.checkpoint_every > 0 && (step + 1) % cfg_.checkpoint_every == 0) {
      checkpointer_->save(next_step_, trainer_state());
      saved_step_ = next_step_;
    }
    rec.checkpoint_ms = checkpointer_->last_save().step == step + 1 ? checkpointer_->last_save().stall_ms : 0;
  }
  rec.time_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  rec.grad_norm = r.grad_norm;
  rec.tp_traffic = gpt_->tp_traffic();
  rec.cp_bytes = gpt_->cp_bytes_sent() - cp_before;
  rec.skipped = r.skipped;
  rec.loss_scale = r.loss_scale;
  return rec;
}

namespace {
// One micro-batch's forwards through the P x V stages and nothing else: stage s on pp rank s % P receives its input
// from the rank of stage s - 1 and sends its output on (a local hand-over where consecutive stages share a rank).
PipelineSchedule forward_only_schedule(PipelineScheduleKind kind, int P, int V) {
  std::vector<std::vector<PipelineAction>> lists(static_cast<std::size_t>(P));
  for (int s = 0; s < P * V; ++s) {
    std::vector<PipelineAction>& list = lists[static_cast<std::size_t>(s % P)];
    if (s > 0 && (s - 1) % P != s % P)
      list.push_back({PipelineActionKind::kRecvActivation, 0, s - 1, (s - 1) % P});
    list.push_back({PipelineActionKind::kForward, 0, s, -1});
    if (s + 1 < P * V && (s + 1) % P != s % P) list.push_back({PipelineActionKind::kSendActivation, 0, s, (s + 1) % P});
  }
  return PipelineSchedule(kind, P, 1, V, std::move(lists));
}

// ShardedModel::set_forward_only for a scope.
class ForwardOnly {
 public:
  explicit ForwardOnly(ShardedModel& m) : m_(m) { m_.set_forward_only(true); }
  ~ForwardOnly() { m_.set_forward_only(false); }
  ForwardOnly(const ForwardOnly&) = delete;
  ForwardOnly& operator=(const ForwardOnly&) = delete;

 private:
  ShardedModel& m_;
};
}  // namespace

double GptTrainer::evaluate(const TokenFile& data, int batches) {
  STRATA_CHECK(batches >= 1, "--eval-steps {} must be at least 1", batches);
  const ForwardOnly scope(*model_);
  const int dp = mesh_->dp().size(), dp_rank = mesh_->dp().rank();
  const std::uint64_t per_batch = rows_per_step();
  double loss = 0;  // this rank's sum of micro-batch mean losses
  int micro_batches = 0;
  if (executor_) {
    if (!eval_executor_) {
      eval_schedule_ = std::make_unique<PipelineSchedule>(forward_only_schedule(cfg_.pp_schedule, cfg_.pp,
                                                                                cfg_.pp_virtual));
      eval_executor_ = std::make_unique<PipelineExecutor>(*eval_schedule_, mesh_->pp());
    }
    const int rows = cfg_.micro_batch_rows(), M = cfg_.micro_batches();
    GptPipelineStage stage(*gpt_, *model_, data, rows, cfg_.seq, dp, dp_rank, false, chunks_);
    for (int b = 0; b < batches; ++b)
      for (int m = 0; m < M; ++m) {
        // Micro-batch m of a step's rows, as the training schedule's stage reads it.
        stage.begin_step(static_cast<std::uint64_t>(b) * per_batch + static_cast<std::uint64_t>(m * dp) * rows, 0.0f);
        with_fit_advice([&] { eval_executor_->run_step(stage); });
        loss += part_.last ? stage.loss_sum() : 0.0;
        ++micro_batches;
      }
  } else {
    const std::uint64_t rows_per_micro_batch = static_cast<std::uint64_t>(dp) * static_cast<std::uint64_t>(cfg_.batch);
    for (int b = 0; b < batches; ++b)
      for (int a = 0; a < cfg_.grad_accum; ++a) {
        const std::uint64_t first = static_cast<std::uint64_t>(b) * per_batch + a * rows_per_micro_batch +
                                    static_cast<std::uint64_t>(dp_rank) * static_cast<std::uint64_t>(cfg_.batch);
        if (chunks_)
          fill_chunk_rows(data, first, cfg_.batch, *chunks_, inputs_.data(), targets_.data());
        else
          fill_rows(data, first, cfg_.batch, cfg_.seq, inputs_.data(), targets_.data());
        with_fit_advice([&] { loss += gpt_->forward_loss(inputs_.data(), targets_.data()); });
        ++micro_batches;
      }
  }
  // As a step's loss: the mean over dp x cp of each rank's mean, held by the last stage and handed along pp.
  loss /= micro_batches;
  return sum_over_ranks(mesh_->pp(), sum_over_ranks(mesh_->dp_cp(), loss) / mesh_->dp_cp().size());
}

void GptTrainer::finish() {
  if (!checkpointer_) return;
  if (saved_step_ != next_step_) checkpointer_->save(next_step_, trainer_state());
  saved_step_ = next_step_;
  checkpointer_->wait();
}

nlohmann::json GptTrainer::trainer_state() const {
  GptTrainerState s;
  s.next_step = next_step_;
  s.rows_done = rows_done_;
  s.seed = cfg_.seed;  // training draws nothing at random after the init
  s.world_size = rt_.world_size();
  s.config = cfg_.to_json();
  s.data = data_record_;
  s.resume_notes = resume_notes_;
  return s.to_json();
}

void GptTrainer::resume() {
  // What the directory holds, as every rank reads it (they read the same files): what is loaded, what is passed over.
  ResumePlan plan = CheckpointDir(cfg_.checkpoint.dir).resume_plan();
  STRATA_CHECK_CODE(ErrorCode::kIo, plan.refusal.empty(), "--resume: {}", plan.refusal);
  resume_notes_ = plan.notes;
  // Where each host has a directory of its own, a save that stopped between the hosts' commits leaves them at
  // different steps: the newest that all of them hold is the one to load.
  const std::vector<double> latest = all_gather_values(rt_.world(), static_cast<double>(plan.step));
  const auto [lo, hi] = std::minmax_element(latest.begin(), latest.end());
  if (*lo != *hi) {
    const std::int64_t common = static_cast<std::int64_t>(*lo);
    const std::vector<std::int64_t> mine = CheckpointDir(cfg_.checkpoint.dir).committed_steps();
    const bool have = common < 0 || std::binary_search(mine.begin(), mine.end(), common);
    all_agree(rt_.world(), have,
              fmt::format("--resume: the ranks' directories {} disagree on the newest checkpoint (steps {} to {}), and "
                          "this rank's has no committed {}: there is no step every rank can load",
                          cfg_.checkpoint.dir, common, static_cast<std::int64_t>(*hi), CheckpointDir::step_name(common)),
              "--resume: agreeing on the checkpoint every rank holds");
    STRATA_CHECK_CODE(ErrorCode::kIo, common >= 0,
                      "--resume: some ranks see no committed checkpoint in {} and others see up to step {}: there is "
                      "no step every rank can load",
                      cfg_.checkpoint.dir, static_cast<std::int64_t>(*hi));
    resume_notes_.push_back(fmt::format("the ranks' copies of {} hold committed checkpoints up to steps {} to {} (a "
                                        "save stopped between the hosts' commits): resuming from {}, the newest all "
                                        "of them hold",
                                        cfg_.checkpoint.dir, common, static_cast<std::int64_t>(*hi),
                                        CheckpointDir::step_name(common)));
    plan.step = common;
  }
  if (plan.step < 0) return;  // a new directory (or only interrupted saves, named in the notes): from step 0
  // Another family's checkpoint holds other tensors: say so before the load would name them one by one.
  {
    const std::string where = CheckpointDir(cfg_.checkpoint.dir).step_path(plan.step) + "/index.json";
    const nlohmann::json saved = CheckpointDir(cfg_.checkpoint.dir).read_index(plan.step).state.value(
        "trainer", nlohmann::json::object());
    const std::string family = GptTrainerState::parse(saved, "checkpoint index " + where, nullptr).family;
    STRATA_CHECK_CODE(ErrorCode::kMismatch, family == family_name(cfg_.model.family),
                      "--resume: {} holds a {} model, this run trains a {} one (--family {})", where, family,
                      family_name(cfg_.model.family), family_name(cfg_.model.family));
  }
  // The weights, the moments and the optimizer's scalars, then where the data and the schedule stood.
  const nlohmann::json state = checkpointer_->load(plan.step);
  resumed_from_ = checkpointer_->last_load().step;
  const std::string index = CheckpointDir(cfg_.checkpoint.dir).step_path(resumed_from_) + "/index.json";
  std::vector<std::string> unknown;
  const GptTrainerState s = GptTrainerState::parse(state, "checkpoint index " + index, &unknown);
  for (const std::string& f : unknown)
    resume_notes_.push_back(fmt::format("{}: trainer field {} is not one this train_gpt knows: ignored", index, f));
  STRATA_CHECK_CODE(ErrorCode::kIo, s.next_step == resumed_from_,
                    "checkpoint index {}: .state.trainer.next_step is {}, but the checkpoint is of step {}: the "
                    "trainer state does not belong to it",
                    index, s.next_step, resumed_from_);
  // Heads do not change the weights' shapes (the load accepts them) but they change the model they make.
  STRATA_CHECK_CODE(ErrorCode::kMismatch, !s.heads || *s.heads == cfg_.model.heads,
                    "--resume: {} was trained with {} attention heads, this run has --heads {}: the same weights "
                    "split into other heads are another model. Resume with --heads {}, or start from its weights "
                    "(strata-ckpt export, then --init)",
                    index, s.heads.value_or(0), cfg_.model.heads, s.heads.value_or(0));
  if (s.data && !s.data->same_tokens(data_record_))
    resume_notes_.push_back(fmt::format("the checkpoint was trained on {}; this run reads {}: its data position ({} "
                                        "rows done) continues in other data",
                                        s.data->describe(), data_record_.describe(), s.rows_done));
  if (s.seq && *s.seq != cfg_.seq)
    resume_notes_.push_back(fmt::format("the checkpoint counted its data position in rows of {} tokens; this run's "
                                        "rows are {} (--seq): the rows done ({}) are counted in the new rows",
                                        *s.seq, cfg_.seq, s.rows_done));
  // The rows a step trained (the data position over the steps) against this run's: another global batch is allowed
  // (a deliberate change) but said, since the losses then differ from the run that was never stopped.
  if (s.next_step > 0 && s.rows_done % static_cast<std::uint64_t>(s.next_step) == 0 &&
      s.rows_done / static_cast<std::uint64_t>(s.next_step) != rows_per_step())
    resume_notes_.push_back(fmt::format("the checkpoint trained {} rows a step, this run trains {} (data-parallel "
                                        "ranks x --batch x --grad-accum): give --global-batch {} to keep its global "
                                        "batch",
                                        s.rows_done / static_cast<std::uint64_t>(s.next_step), rows_per_step(),
                                        s.rows_done / static_cast<std::uint64_t>(s.next_step)));
  start_step_ = static_cast<int>(s.next_step);
  next_step_ = start_step_;
  rows_done_ = s.rows_done;
  saved_step_ = start_step_;
}

void GptTrainer::save(const std::string& path) {
  // Every rank computes the same header; rank 0 writes it into this job's temporary (path.tmp.<job id>: never one
  // another job saving to `path` uses) at its full size, then each rank writes the values it owns at their places, and
  // rank 0 renames the file once every rank has flushed its part. The rename is the only commit: a save that fails
  // anywhere removes the temporary.
  // The whole model's parameters, whatever part of a pipeline this rank holds.
  SafetensorsWriter writer;
  std::map<std::string, std::size_t> declared;  // name -> index in declaration order
  for (const UnitSpec& u : gpt_units(cfg_.model, cfg_.tp))
    for (const SlotSpec& s : u.slots) {
      const std::size_t index = declared.size();
      declared[s.name] = index;
      writer.declare(s.name, DType::kF32, s.tp.replicated() ? s.shape : s.tp.global_shape);
    }
  std::vector<std::uint64_t> offsets;  // per slot, in declaration order
  const std::string head =
      writer.header(nlohmann::json{{"format", "pt"}, {"written_by", "strata train_gpt"}}, &offsets);
  const std::string tmp = tmp_path_for(path, rt_.job_id());
  Communicator& world = rt_.world();
  // Never a file of non-finite weights: checked before anything is written, so `path` stays as it was.
  ShardedParameters& checked = model_->parameters();
  checked.stream().synchronize();
  const NonFiniteAt bad = lowest_over_ranks(world, find_nonfinite(checked, ShardValues::kMaster, true));
  STRATA_CHECK_CODE(ErrorCode::kNonFinite, !bad.found(),
                    "not saving {}: the weights are not finite: {} (the first such place on any rank); the file is "
                    "left as it was", path, describe_nonfinite(checked, bad));
  std::string error;
  struct RemoveUnlessCommitted {
    const std::string& tmp;
    bool armed = false;
    ~RemoveUnlessCommitted() {
      if (armed) ::unlink(tmp.c_str());
    }
  } cleanup{tmp};
  if (rt_.rank() == 0) {
    cleanup.armed = true;  // the rank that creates it removes it
    try {
      const std::uint64_t end = head.size() + parameters_ * 4;
      const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      STRATA_CHECK_CODE(ErrorCode::kIo, fd >= 0, "cannot create {}: {}", tmp, std::strerror(errno));
      pwrite_all(fd, head.data(), head.size(), 0, tmp);
      const bool sized = ::ftruncate(fd, static_cast<off_t>(end)) == 0;
      ::close(fd);
      STRATA_CHECK_CODE(ErrorCode::kIo, sized, "cannot size {} to {} bytes: {}", tmp, end, std::strerror(errno));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  all_agree(world, error.empty(), error, "saving " + path);
  try {
    const int tp_rank = mesh_->tp().rank();
    ShardedParameters& params = model_->parameters();
    params.stream().synchronize();
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC);
    STRATA_CHECK_CODE(ErrorCode::kIo, fd >= 0, "cannot open {}: {}", tmp, std::strerror(errno));
    std::vector<float> host;
    try {
      for (int u = 0; u < model_->num_units(); ++u) {
        if (part_.holds_tied_copy() && u == tied_->unit()) continue;  // the first stage writes the tied weights
        const UnitShard shard = params.unit(u);
        for (const ShardSegment& seg : params.owned_segments(u)) {
          const ParamSlot& slot = shard.layout->slots()[seg.slot];
          if (slot.tp.replicated() && tp_rank != 0) continue;  // every tp rank holds it: the first writes it
          const float* src = shard.master + seg.shard_begin;
          if (params.device().kind() != DeviceKind::kCpu) {  // device memory: through the host
            host.resize(seg.length);
            params.device().copy_to_host(host.data(), src, seg.length * 4);
            src = host.data();
          }
          // A tp slice's local runs land at their places in the global tensor (padding is not written, a piece
          // several tp ranks hold is written by the first).
          for_each_global_run(
              slot.tp, tp_rank, cfg_.tp, seg.slot_begin, seg.length,
              [&](std::size_t local, std::size_t global, std::size_t n) {
                pwrite_all(fd, src + (local - seg.slot_begin), n * 4, offsets[declared.at(slot.name)] + global * 4,
                           tmp);
              },
              /*owned_only=*/true);
        }
      }
      STRATA_CHECK_CODE(ErrorCode::kIo, ::fsync(fd) == 0, "cannot flush {} to disk: {}", tmp, std::strerror(errno));
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  } catch (const std::exception& e) {
    error = e.what();
  }
  all_agree(world, error.empty(), error, "saving " + path);
  if (rt_.rank() == 0) {
    try {
      STRATA_CHECK_CODE(ErrorCode::kIo, ::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename {} to {}: {}", tmp,
                        path, std::strerror(errno));
      cleanup.armed = false;
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  all_agree(world, error.empty(), error, "saving " + path);
}

void GptTrainer::save_hf(const std::string& dir, std::uint64_t max_shard_bytes, const std::vector<std::string>& copy_in) {
  const std::string weights = tmp_path_for(dir, rt_.job_id() + ".weights");
  save(weights);  // collective; refuses weights that are not finite
  std::string error;
  if (rt_.rank() == 0) {
    try {
      const SafetensorsReader reader(weights);
      const ParamReader param = [&](const std::string& name, std::uint64_t begin, std::uint64_t count, float* out) {
        reader.read_f32(name, begin, count, out);
      };
      hf::write_hf_directory(dir, hf_config_json(cfg_.model, DType::kF32), hf_tensors(cfg_.model, param), DType::kF32,
                             max_shard_bytes, {{"written_by", "strata train_gpt --save-hf"}}, copy_in);
    } catch (const std::exception& e) {
      error = e.what();
    }
    ::unlink(weights.c_str());
  }
  all_agree(rt_.world(), error.empty(), error, "saving " + dir);
}

}  // namespace strata::gpt
