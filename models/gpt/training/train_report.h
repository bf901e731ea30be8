// What train_gpt prints and records: the run's banner, the model FLOPs and MFU, one line and one metrics record per
// step, the planner's memory beside the ledger's after step 0, the checkpoint written, and the run's JSON summary.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/output_file.h"
#include "models/gpt/model/model_flops.h"
#include "models/gpt/training/gpt_memory.h"
#include "models/gpt/training/gpt_trainer.h"
#include "models/gpt/training/train_flags.h"

namespace strata::gpt {

// Model FLOPs utilisation: every rank's share of the job's model FLOPs against one device's peak, for the dtype of
// the products (--compute-dtype): the bf16 tensor-core rate for bf16, the f32 one otherwise.
class Throughput {
 public:
  // peak_tflops > 0: --peak-tflops; else the device's known peak, if any.
  Throughput(const GptConfig& model, int seq, double peak_tflops, const Device& device, DType matmul, int world);
  bool has_peak() const { return peak_tflops_ > 0; }
  double peak_tflops() const { return peak_tflops_; }
  const std::string& peak_source() const { return peak_source_; }
  const ModelFlops& flops() const { return flops_; }
  // Achieved model TFLOP/s per device and MFU (NaN without a peak) at `tok_s` tokens/s for the job.
  double model_tflops(double tok_s) const;
  double mfu(double tok_s) const;
  // The line train_gpt prints: the FLOPs per token and what MFU is measured against (or why there is none).
  std::string describe(const Device& device) const;

 private:
  ModelFlops flops_;
  double peak_tflops_ = 0;
  std::string peak_source_;
  int world_ = 1;
};

// Rank 0: what runs (model, layout, precision, pipeline, data, resume).
void print_run_banner(const TrainFlags& f, const TrainConfig& cfg, GptTrainer& trainer, Runtime& rt,
                      const TokenFile& data);

// The steps' report on rank 0 (the other ranks keep only what the summary needs).
class RunLog {
 public:
  // `before`: the device's bytes per category before the trainer was built (the ledger's baseline for step 0).
  // `rss_at_start`: this rank's resident set once the runtime had started, before the data and the model (the
  // program and its libraries: a CUDA build's are about 200 MB before any model).
  RunLog(const TrainFlags& f, const TrainConfig& cfg, GptTrainer& trainer, Runtime& rt, const Throughput& throughput,
         const CategoryBytes& before, std::uint64_t rss_at_start);
  // After each step: its line, its metrics record, the progress bar, and after step 0 the memory table.
  void step(int step, const StepRecord& r);
  // After an evaluation (GptTrainer::evaluate) after step `step`: its line and metrics record; the last is the
  // summary's final_val_loss.
  void eval(int step, double val_loss);
  // After the steps: closes --metrics (a deferred write error is reported here).
  void close_metrics() { metrics_.close(); }
  // After GptTrainer::finish: the checkpoint it committed, or why none was written.
  void print_checkpoint() const;
  // Collective (the ledgers of every rank): the run's JSON summary, printed on rank 0.
  void print_summary() const;

 private:
  void record_metrics(int step, const StepRecord& r, const StepSummary& comm, double tok_s, std::size_t peak);
  void print_step0_memory();
  nlohmann::json summary() const;  // without the ledgers

  const TrainFlags& f_;
  const TrainConfig& cfg_;
  GptTrainer& trainer_;
  Runtime& rt_;
  const Throughput& throughput_;
  CategoryBytes before_;
  std::uint64_t rss_at_start_;
  OutputFile metrics_;  // every record written through at once: a full disk is an error at that step
  bool bar_ = false;
  double tokens_per_step_ = 0;
  TpTraffic tp_predicted_;
  std::uint64_t cp_predicted_ = 0;  // predict_cp_bytes: the ring's bytes a step
  std::optional<double> final_loss_;  // the last step's; none when no step ran (--steps 0)
  int steps_run_ = 0, steps_skipped_ = 0;
  double time_sum_ms_ = 0, exposed_sum_ms_ = 0, comm_sum_ms_ = 0, data_sum_ms_ = 0;
  std::optional<double> final_val_loss_;
  int timed_ = 0;                                       // steps from step 2 on, which the means count
  CategoryBytes predicted_step0_{}, measured_step0_{};  // rank 0, CPU backend: the planner against the ledger
};

}  // namespace strata::gpt
