// train_gpt's output: the banner, the FLOPs line, the step lines and metrics records, the memory tables, the summary.
#include "models/gpt/training/train_report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "collectives/rank_values.h"
#include "core/byte_units.h"
#include "core/host_memory.h"
#include "kernels/cpu/matmul.h"
#include "runtime/memory/memory_ledger.h"

namespace strata::gpt {

namespace {

// A one-line progress bar with an ETA, redrawn on stderr when it is a terminal.
void progress(int done, int total, double mean_ms) {
  int width = 30, filled = total ? done * width / total : width;
  double eta_s = (total - done) * mean_ms / 1000.0;
  std::fprintf(stderr, "\r[%.*s%*s] %d/%d ETA %.0fs ", filled, "##############################", width - filled, "",
               done, total, eta_s);
  if (done == total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

// What the products run on: the CPU's bf16 path depends on the CPU (oneDNN's matmul, or rounded operands through
// sgemm where it has none), so the log names it.
std::string compute_text(const TrainConfig& cfg, DeviceKind backend) {
  if (cfg.precision.matmul != DType::kBF16) return "compute f32";
  if (backend == DeviceKind::kCpu) return fmt::format("compute bf16 (f32 accumulation; {})", cpu::bf16_gemm_name());
  return "compute bf16 (f32 accumulation; cuBLAS bf16 GEMMs)";
}

// ", recompute full (+33.1% FLOPs run again beside the model's)"; after --recompute auto, the list it chose too.
std::string recompute_text(const TrainConfig& cfg) {
  const RecomputePolicy& r = cfg.recompute;
  if (!r.any()) return "";
  const double extra = static_cast<double>(ModelFlops::recompute_per_token(cfg.model, cfg.seq, r)) /
                       static_cast<double>(ModelFlops::of(cfg.model, cfg.seq).per_token);
  std::string text = fmt::format(", recompute {} (+{:.1f}% FLOPs run again beside the model's)",
                                 r.describe(cfg.model.layers), 100 * extra);
  if (r.automatic) text += fmt::format("; --recompute auto chose --recompute {}", r.flags(cfg.model.layers));
  return text;
}

void print_pipeline(const TrainFlags& f, const TrainConfig& cfg, GptTrainer& trainer, const PipelineSchedule& sched) {
  std::string stages;
  const auto ranges = split_layers(cfg.model.layers, f.pp, f.pp_virtual);
  for (std::size_t s = 0; s < ranges.size(); ++s)
    stages += fmt::format("{}stage {}: layers [{}, {})", s ? ", " : "", s, ranges[s].first, ranges[s].last);
  const bool uneven = cfg.model.layers % (f.pp * f.pp_virtual) != 0;
  std::printf("train_gpt: pipeline %s, %d stages x %d micro-batches of %d rows (%s%s); %s; %s\n",
              pipeline_schedule_name(sched.kind()), sched.num_stages(), sched.micro_batches(), cfg.micro_batch_rows(),
              stages.c_str(), uneven ? "; uneven: the earlier stages take the extra layers" : "",
              f.pp_reshard ? "units reduced and freed after every micro-batch"
                           : "units reduced once per step, kept gathered between micro-batches",
              trainer.mesh().describe().c_str());
  if (f.verbose) std::printf("%s\n", sched.to_string().c_str());
}

void print_resume(const TrainFlags& f, GptTrainer& trainer) {
  for (const std::string& note : trainer.resume_notes())
    std::printf("train_gpt: WARNING: --resume: %s\n", note.c_str());
  if (f.resume && trainer.resumed_from() >= 0) {
    const LoadStats& load = trainer.checkpointer()->last_load();
    std::printf(
        "train_gpt: resumed from %s/step-%08lld: optimizer step %lld, next step %d (%.1f MB read on rank 0 in "
        "%.0f ms)\n",
        f.checkpoint_dir.c_str(), static_cast<long long>(load.step), static_cast<long long>(trainer.resumed_from()),
        trainer.start_step(), static_cast<double>(load.bytes) / 1e6, load.ms);
  } else if (f.resume) {
    std::printf("train_gpt: no committed checkpoint in %s (%s): starting from step 0\n", f.checkpoint_dir.c_str(),
                trainer.resume_notes().empty() ? "a new directory" : "see the warnings above");
  }
}

nlohmann::json ledger_peaks(const std::vector<LedgerRow>& rows) {
  nlohmann::json peaks = nlohmann::json::array();
  for (const LedgerRow& row : rows) {
    nlohmann::json p;
    for (std::size_t i = 0; i < kNumMemCategories; ++i)
      if (row.peak[i]) p[mem_category_name(static_cast<MemCategory>(i))] = row.peak[i];
    p["total"] = row.peak_total;
    peaks.push_back({{"rank", row.rank}, {"peak_bytes", p}});
  }
  return peaks;
}

nlohmann::json category_json(const CategoryBytes& b) {
  nlohmann::json j;
  for (std::size_t i = 0; i < kNumMemCategories; ++i)
    if (b[i]) j[mem_category_name(static_cast<MemCategory>(i))] = b[i];
  j["total"] = total(b);
  return j;
}

}  // namespace

Throughput::Throughput(const GptConfig& model, int seq, double peak_tflops, const Device& device, DType matmul,
                       int world)
    : flops_(ModelFlops::of(model, seq)), world_(world) {
  peak_source_ = peak_tflops > 0 ? "--peak-tflops" : "";
  peak_tflops_ = peak_tflops > 0 ? peak_tflops : known_peak_tflops(device.product_name(), matmul, &peak_source_);
}

double Throughput::model_tflops(double tok_s) const {
  return tok_s * static_cast<double>(flops_.per_token) / world_ / 1e12;
}

double Throughput::mfu(double tok_s) const { return has_peak() ? model_tflops(tok_s) / peak_tflops_ : std::nan(""); }

std::string Throughput::describe(const Device& device) const {
  const std::string against =
      has_peak() ? fmt::format("MFU against {:.1f} TFLOP/s per device ({})", peak_tflops_, peak_source_)
                 : fmt::format("no MFU: the peak of '{}' is not known (give --peak-tflops)",
                               device.product_name().empty() ? device.name() : device.product_name());
  return fmt::format("{:.4g} model FLOPs per token (6 x {} parameters + {:.4g} attention); {}",
                     static_cast<double>(flops_.per_token), flops_.params, static_cast<double>(flops_.attention),
                     against);
}

void print_run_banner(const TrainFlags& f, const TrainConfig& cfg, GptTrainer& trainer, Runtime& rt,
                      const TokenFile& data) {
  if (rt.rank() != 0) return;
  std::printf(
      "train_gpt: %s, %zu parameters; %d data-parallel ranks x %d rows x %d tokens x %d micro-batches; %s, "
      "%s%s\n",
      cfg.model.describe().c_str(), trainer.parameters(), trainer.mesh().dp().size(), cfg.micro_batch_rows(), cfg.seq,
      cfg.micro_batches_per_step(), trainer.model().resources().options().describe().c_str(),
      compute_text(cfg, rt.backend()).c_str(), recompute_text(trainer.config()).c_str());
  if (cfg.tp > 1)
    std::printf("train_gpt: tensor parallel %d%s; %s\n", cfg.tp,
                cfg.sequence_parallel ? " with sequence parallelism" : "", trainer.mesh().describe().c_str());
  if (const PipelineSchedule* sched = trainer.schedule()) print_pipeline(f, cfg, trainer, *sched);
  std::printf("train_gpt: data %s (%llu tokens), init %s, backend %s\n", data.path().c_str(),
              static_cast<unsigned long long>(data.size()), f.init.empty() ? "spec distributions" : f.init.c_str(),
              device_kind_name(rt.backend()));
  print_resume(f, trainer);
  std::fflush(stdout);
}

RunLog::RunLog(const TrainFlags& f, const TrainConfig& cfg, GptTrainer& trainer, Runtime& rt,
               const Throughput& throughput, const CategoryBytes& before, std::uint64_t rss_at_start)
    : f_(f),
      cfg_(cfg),
      trainer_(trainer),
      rt_(rt),
      throughput_(throughput),
      before_(before),
      rss_at_start_(rss_at_start) {
  // A resumed run appends: the records of the run it continues (a restart after a lost host among them) stay, and a
  // step trained again is recorded again, the later record the one that counts.
  if (rt.rank() == 0 && !f.metrics.empty())
    metrics_ = OutputFile(f.metrics, "--metrics",
                          trainer.resumed_from() >= 0 ? OutputFile::Mode::kAppend : OutputFile::Mode::kTruncate);
  bar_ = rt.rank() == 0 && !f.no_progress && isatty(STDERR_FILENO);
  tokens_per_step_ = static_cast<double>(trainer.mesh().dp().size()) * f.batch * f.seq * f.grad_accum;
  tp_predicted_ = predict_tp_traffic(cfg);
  cp_predicted_ = predict_cp_bytes(cfg);
}

void RunLog::step(int step, const StepRecord& r) {
  const StepSummary& comm = trainer_.model().resources().last_step_summary();
  if (step >= 2) {
    time_sum_ms_ += r.time_ms;
    data_sum_ms_ += r.data_ms;
    exposed_sum_ms_ += comm.exposed_comm_ms;
    comm_sum_ms_ += comm.comm_ms;
    ++timed_;
  }
  final_loss_ = r.loss;
  ++steps_run_;
  if (r.skipped) ++steps_skipped_;
  if (rt_.rank() != 0) return;
  const double tok_s = tokens_per_step_ / (r.time_ms / 1000.0);
  const std::size_t peak = rt_.device().memory_stats().peak_total();
  std::printf(
      "step %d loss %.6f lr %.4g time_ms %.1f tok/s %.0f peak_mem_MiB %.1f grad_norm %.4f comm_ms %.1f "
      "exposed_comm_ms %.1f tflops %.3g%s%s%s\n",
      step, r.loss, r.lr, r.time_ms, tok_s, mib(static_cast<double>(peak)), r.grad_norm, comm.comm_ms, comm.exposed_comm_ms,
      throughput_.model_tflops(tok_s),
      throughput_.has_peak() ? fmt::format(" mfu {:.1f}%", 100.0 * throughput_.mfu(tok_s)).c_str() : "",
      r.skipped ? " skipped" : "",
      r.checkpoint_ms > 0 ? fmt::format(" checkpoint_ms {:.1f}", r.checkpoint_ms).c_str() : "");
  std::fflush(stdout);
  if (metrics_.is_open()) record_metrics(step, r, comm, tok_s, peak);
  if (bar_) progress(step + 1, f_.last_step(), timed_ ? time_sum_ms_ / timed_ : r.time_ms);
  if (step == 0 && rt_.backend() == DeviceKind::kCpu) print_step0_memory();
}

void RunLog::eval(int step, double val_loss) {
  final_val_loss_ = val_loss;
  if (rt_.rank() != 0) return;
  std::printf("eval step %d val_loss %.6f (%d batches of %s)\n", step, val_loss, f_.eval_steps,
              (f_.val_text.empty() ? f_.val_data : f_.val_text).c_str());
  std::fflush(stdout);
  if (metrics_.is_open()) metrics_.write(nlohmann::json{{"step", step}, {"val_loss", val_loss}}.dump() + "\n");
}

void RunLog::record_metrics(int step, const StepRecord& r, const StepSummary& comm, double tok_s, std::size_t peak) {
  const double mfu = throughput_.mfu(tok_s);
  metrics_.write(nlohmann::json{{"step", step},
                                {"loss", r.loss},
                                {"lr", r.lr},
                                {"time_ms", r.time_ms},
                                {"tokens_per_s", tok_s},
                                {"grad_norm", r.grad_norm},
                                {"checkpoint_ms", r.checkpoint_ms},
                                {"data_ms", r.data_ms},
                                {"skipped", r.skipped},
                                {"loss_scale", r.loss_scale},
                                {"peak_mem_bytes", peak},
                                {"comm_ms", comm.comm_ms},
                                {"exposed_comm_ms", comm.exposed_comm_ms},
                                {"model_tflops_per_device", throughput_.model_tflops(tok_s)},
                                {"mfu", throughput_.has_peak() ? nlohmann::json(mfu) : nlohmann::json()},
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
                                {"tp_comm_ms", r.tp_traffic.comm_ms},
                                {"predicted_tp_bytes", tp_predicted_.total()},
                                {"cp_bytes", r.cp_bytes},
                                {"predicted_cp_bytes", cp_predicted_}}
                     .dump() +
                 "\n");
}

void RunLog::print_step0_memory() {
  // The planner's prediction beside the ledger's measured peak (rank 0), after the first step.
  for (std::size_t i = 0; i < kNumMemCategories; ++i)
    measured_step0_[i] = rt_.device().memory_stats().peak(static_cast<MemCategory>(i)) - before_[i];
  predicted_step0_ = predict_step_memory(cfg_, rt_.world_size());
  std::printf("memory after step 0, rank 0 (bytes):\n%s", prediction_table(predicted_step0_, measured_step0_).c_str());
  // The device's own count beside the ledger's, where the driver gives one: what the ledger does not see is the
  // difference.
  if (const std::size_t driver = rt_.device().driver_bytes_in_use()) {
    const std::size_t ledger = rt_.device().memory_stats().current_total();
    std::printf(
        "device memory in use as its driver counts it (cudaMemGetInfo): %zu; Strata's ledger: %zu; the %lld between "
        "them is outside the ledger (the CUDA context, cuBLAS and cuDNN workspaces, NCCL's buffers, other processes "
        "on the GPU)\n",
        driver, ledger, static_cast<long long>(driver) - static_cast<long long>(ledger));
  }
  if (const Device* host = trainer_.model().resources().host_device()) {
    CategoryBytes host_measured{};
    for (std::size_t i = 0; i < kNumMemCategories; ++i)
      host_measured[i] = host->memory_stats().peak(static_cast<MemCategory>(i));
    std::printf("host memory (offload) after step 0, rank 0 (bytes):\n%s",
                prediction_table(predict_host_memory(cfg_, rt_.world_size()), host_measured).c_str());
  }
  std::fflush(stdout);
}

void RunLog::print_checkpoint() const {
  const Checkpointer* ckpt = trainer_.checkpointer();
  if (rt_.rank() != 0 || !ckpt) return;
  // Only what happened: a run that wrote nothing (it resumed at its last step) says so.
  const SaveStats& last = ckpt->last_save();
  if (last.committed)
    std::printf("train_gpt: checkpoint %s/step-%08lld committed (%.1f MB on rank 0, written in %.0f ms)\n",
                f_.checkpoint_dir.c_str(), static_cast<long long>(last.step), static_cast<double>(last.bytes) / 1e6,
                last.write_ms);
  else
    std::printf("train_gpt: no checkpoint written: %s/step-%08lld, which this run resumed from, is where it stands\n",
                f_.checkpoint_dir.c_str(), static_cast<long long>(trainer_.resumed_from()));
}

void RunLog::print_summary() const {
  const std::vector<LedgerRow> ledger = MemoryLedger::gather(rt_.device(), rt_.world());
  std::vector<LedgerRow> host_ledger;
  if (Device* host = trainer_.model().resources().host_device()) host_ledger = MemoryLedger::gather(*host, rt_.world());
  // The largest resident set of any rank so far: what the process held, token shards' mapped pages included.
  const std::uint64_t peak = peak_resident_bytes();
  const std::vector<double> rss = all_gather_values(rt_.world(), static_cast<double>(peak));
  // What the run added to it after the runtime started: the model, the data's mapped pages, the workspaces.
  const std::vector<double> added =
      all_gather_values(rt_.world(), static_cast<double>(peak > rss_at_start_ ? peak - rss_at_start_ : 0));
  if (rt_.rank() != 0) return;
  // A run that changed no weight says so in words, not only as a null or a count in the summary.
  if (steps_run_ == 0 && trainer_.resumed_from() < 0)
    std::printf("train_gpt: no step ran (--steps %d): final_loss is null\n", f_.steps);
  else if (steps_run_ > 0 && steps_skipped_ == steps_run_)
    std::printf(
        "train_gpt: warning: all %d steps were skipped (non-finite gradients%s): the weights are the ones the "
        "run started from\n",
        steps_run_, trainer_.config().optimizer.dynamic_loss_scale ? ", the f16 loss scale still falling" : "");
  nlohmann::json s = summary();
  s["peak_rss_bytes"] = static_cast<std::uint64_t>(*std::max_element(rss.begin(), rss.end()));
  s["peak_rss_above_start_bytes"] = static_cast<std::uint64_t>(*std::max_element(added.begin(), added.end()));
  s["peak_memory"] = ledger_peaks(ledger);
  s["host_peak_memory"] = ledger_peaks(host_ledger);
  if (total(predicted_step0_) > 0)  // what the trainer itself allocated in step 0 on rank 0, per category
    s["step0_memory_rank0"] = {{"predicted", category_json(predicted_step0_)},
                               {"measured", category_json(measured_step0_)}};
  std::printf("%s\n", s.dump().c_str());
}

nlohmann::json RunLog::summary() const {
  const double mean_ms = timed_ ? time_sum_ms_ / timed_ : 0;
  const double mean_tok_s = mean_ms > 0 ? tokens_per_step_ / (mean_ms / 1000.0) : 0;
  // What the resume did (the step it loaded, or null) and what it warned about; the step this run committed.
  nlohmann::json resume_record;
  if (f_.resume)
    resume_record = {
        {"from_step", trainer_.resumed_from() >= 0 ? nlohmann::json(trainer_.resumed_from()) : nlohmann::json()},
        {"warnings", trainer_.resume_notes()}};
  nlohmann::json checkpoint;
  if (const Checkpointer* ckpt = trainer_.checkpointer()) {
    const SaveStats& save = ckpt->last_save();
    checkpoint = {{"step", save.committed ? nlohmann::json(save.step) : nlohmann::json()},
                  {"bytes_rank0", save.bytes},
                  {"write_ms", save.write_ms},
                  {"stall_ms", save.stall_ms},
                  {"load_ms", ckpt->last_load().ms},
                  {"load_bytes_rank0", ckpt->last_load().bytes}};
  }
  const bool mfu = throughput_.has_peak() && mean_ms > 0;
  // Recomputation and activation offload on rank 0: the policy as run, the FLOPs per token it runs again beside the
  // model's, activation offload's host peak and the bytes it copied out and back over the run.
  const TrainConfig& run = trainer_.config();
  const GptModel::OffloadTraffic moved = trainer_.gpt().offload_traffic();
  const Device* acts_host = trainer_.gpt().activation_host();
  const nlohmann::json recompute = {
      {"policy", run.recompute.flags(run.model.layers)},
      {"flops_per_token", ModelFlops::recompute_per_token(run.model, run.seq, run.recompute)},
      {"offload_host_bytes", acts_host ? acts_host->memory_stats().peak(MemCategory::kActivations) : 0},
      {"offload_bytes_out", moved.out},
      {"offload_bytes_in", moved.in}};
  return nlohmann::json{
      {"final_loss", final_loss_ ? nlohmann::json(*final_loss_) : nlohmann::json()},
      {"steps_skipped", steps_skipped_},
      {"final_val_loss", final_val_loss_ ? nlohmann::json(*final_val_loss_) : nlohmann::json()},
      {"mean_step_ms", mean_ms},
      {"tokens_per_s", mean_tok_s},
      {"steps", f_.steps},
      {"mean_exposed_comm_ms", timed_ ? exposed_sum_ms_ / timed_ : 0},
      {"mean_comm_ms", timed_ ? comm_sum_ms_ / timed_ : 0},
      {"exposed_comm_fraction", time_sum_ms_ > 0 ? exposed_sum_ms_ / time_sum_ms_ : 0},
      {"data_fraction", time_sum_ms_ > 0 ? data_sum_ms_ / time_sum_ms_ : 0},
      {"last_step", trainer_.model().resources().last_step_summary().describe()},
      {"flops_per_token", throughput_.flops().per_token},
      {"model_tflops_per_device", throughput_.model_tflops(mean_tok_s)},
      {"peak_tflops", throughput_.has_peak() ? nlohmann::json(throughput_.peak_tflops()) : nlohmann::json()},
      {"peak_source", throughput_.peak_source()},
      {"mfu", mfu ? nlohmann::json(throughput_.mfu(mean_tok_s)) : nlohmann::json()},
      {"ranks", rt_.world_size()},
      {"zero_stage", f_.zero_stage},
      {"parameters", trainer_.parameters()},
      {"offload", f_.offload},
      {"recompute", recompute},
      {"resume", resume_record},
      {"checkpoint", checkpoint}};
}

}  // namespace strata::gpt
