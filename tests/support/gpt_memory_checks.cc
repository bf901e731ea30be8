// expect_step_as_predicted: one step of a GptTrainer measured by the ledgers beside the prediction.
#include "tests/support/gpt_memory_checks.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "models/gpt/training/gpt_trainer.h"
#include "tests/support/test_support.h"

namespace strata::gpt::test {

using strata::test::runtime;

void grow_world_lane(std::uint64_t bytes) {
  if (bytes == 0) return;
  Device& dev = runtime().device();
  Buffer grow = dev.allocate(bytes, MemCategory::kWorkspace);
  dev.fill_zero(grow.data(), bytes, dev.compute_stream());
  runtime().world().all_reduce(grow.data(), grow.data(), bytes / 4, DType::kF32, ReduceOp::kSum, dev.compute_stream());
  dev.compute_stream().synchronize();
}

void expect_close(const CategoryBytes& predicted, const CategoryBytes& measured, const char* where) {
  for (std::size_t i = 0; i < kNumMemCategories; ++i) {
    double p = static_cast<double>(predicted[i]), m = static_cast<double>(measured[i]);
    EXPECT_LE(std::abs(p - m), 0.02 * std::max(p, m)) << where << " " << mem_category_name(static_cast<MemCategory>(i))
                                                      << "\n" << prediction_table(predicted, measured);
  }
}

CategoryBytes expect_step_as_predicted(const TrainConfig& cfg, const TokenFile& data,
                                       std::uint64_t comm_in_place) {
  Device& dev = runtime().device();
  const int world = runtime().world_size();
  const int pp_rank = runtime().rank() / (world / cfg.pp);
  CategoryBytes before{}, peak{}, host_peak{};
  std::uint64_t offloaded = 0;
  GptModel::OffloadTraffic moved;
  for (std::size_t i = 0; i < kNumMemCategories; ++i)
    before[i] = dev.memory_stats().current(static_cast<MemCategory>(i));
  TrainConfig run = cfg;  // as the trainer ran it (--recompute auto chosen)
  {
    GptTrainer trainer(runtime(), cfg, data);
    run = trainer.config();
    dev.memory_stats().reset_peaks();
    trainer.step(0);
    for (std::size_t i = 0; i < kNumMemCategories; ++i) {
      peak[i] = dev.memory_stats().peak(static_cast<MemCategory>(i)) - before[i];
      if (const Device* host = trainer.model().resources().host_device())
        host_peak[i] = host->memory_stats().peak(static_cast<MemCategory>(i));
    }
    if (const Device* acts = trainer.gpt().activation_host())
      offloaded = acts->memory_stats().peak(MemCategory::kActivations);
    moved = trainer.gpt().offload_traffic();
    EXPECT_EQ(trainer.model().resources().host_device() != nullptr, cfg.sharding.offload != OffloadPolicy::kNone);
  }
  CategoryBytes predicted = predict_step_memory(run, world, pp_rank);
  predicted[static_cast<std::size_t>(MemCategory::kCommBuffer)] -= comm_in_place;
  expect_close(predicted, peak, "device");
  expect_close(predict_host_memory(run, world, pp_rank), host_peak, "host");
  const std::uint64_t want = predict_offloaded_activations(run, pp_rank);
  EXPECT_EQ(offloaded, want) << "activation offload's host memory";
  // Every offloaded block's activations go out once per micro-batch and come back at most once (not when the backward
  // finds them still staged). Without a pipeline, exactly: out once, and back all but the last two blocks (the two
  // staging sets still hold them when the backward starts).
  EXPECT_LE(moved.in, moved.out) << "bytes copied back by activation offload";
  if (want > 0 && !run.pipelined() && run.grad_accum == 1) {
    const int n = run.recompute.count(BlockRecompute::kOffload, run.model.layers);
    EXPECT_EQ(moved.out, want) << "bytes copied out by activation offload";
    EXPECT_EQ(moved.in, want / static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(std::max(0, n - 2)))
        << "bytes copied back by activation offload";
  } else if (want > 0) {
    EXPECT_GE(moved.out, want / static_cast<std::uint64_t>(run.micro_batches_per_step()))
        << "bytes copied out by activation offload";
  }
  if (runtime().rank() == 0 && cfg.tp > 1)
    std::printf("tp %d%s x dp %d, ZeRO %d, recompute %s, accum %d, %s, offload %s: predicted%s / measured\n%s",
                cfg.tp, cfg.sequence_parallel ? " (SP)" : "", world / cfg.tp, static_cast<int>(cfg.sharding.stage),
                run.recompute.describe(cfg.model.layers).c_str(), cfg.grad_accum,
                dtype_name(cfg.sharding.mixed_precision.param_dtype), offload_name(cfg.sharding.offload),
                comm_in_place ? fmt::format(" (comm_buffer less {} in place)", comm_in_place).c_str() : "",
                prediction_table(predicted, peak).c_str());
  return peak;
}

}  // namespace strata::gpt::test
