// PipelineExecutor's rehearsal (PipelineExecutor(schedule, pp_rank), no group): for every kind and rank it runs
// exactly the rank's forwards and backwards in its list's order, marks each chunk's last backward and no other,
// gives a backward the slot of its forward and never more slots than slots(). Single-process checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "runtime/parallel/pipeline_executor.h"
#include "runtime/parallel/pipeline_schedule.h"

namespace strata {
namespace {

// Records what the executor calls; no data moves in a rehearsal, so the buffers are never read.
class RecordingStage : public PipelineStage {
 public:
  struct Call {
    bool forward;
    int micro_batch, chunk, slot;
    bool last_of_chunk;
  };
  void forward(int micro_batch, int chunk, int slot) override {
    calls.push_back({true, micro_batch, chunk, slot, false});
  }
  void before_backward(int, int, bool last_of_chunk) override { last_ = last_of_chunk; }
  void backward(int micro_batch, int chunk, int slot) override {
    calls.push_back({false, micro_batch, chunk, slot, last_});
  }
  void* input(int) override { return nullptr; }
  const void* output(int, int) override { return nullptr; }
  void* grad_output() override { return nullptr; }
  const void* grad_input() override { return nullptr; }
  std::size_t boundary_count() const override { return 1; }
  DType boundary_dtype() const override { return DType::kF32; }
  std::vector<Call> calls;

 private:
  bool last_ = false;
};

TEST(PipelineRehearsal, RunsTheRanksComputeActionsInOrder) {
  struct Case {
    PipelineScheduleKind kind;
    int pp, micro_batches, virtual_stages;
  };
  const Case cases[] = {{PipelineScheduleKind::kOneFOneB, 2, 4, 1},
                        {PipelineScheduleKind::kGPipe, 3, 3, 1},
                        {PipelineScheduleKind::kOneFOneB, 4, 8, 1},
                        {PipelineScheduleKind::kInterleaved, 2, 4, 2}};
  for (const Case& c : cases) {
    const PipelineSchedule schedule = PipelineSchedule::build(c.kind, c.pp, c.micro_batches, c.virtual_stages);
    schedule.validate();
    for (int r = 0; r < c.pp; ++r) {
      SCOPED_TRACE(std::string(pipeline_schedule_name(c.kind)) + " pp rank " + std::to_string(r));
      PipelineExecutor rehearsal(schedule, r);
      EXPECT_EQ(rehearsal.slots(), std::max(1, schedule.max_in_flight(r)));
      RecordingStage stage;
      rehearsal.run_step(stage);
      std::vector<PipelineAction> compute;
      for (const PipelineAction& a : schedule.actions(r))
        if (a.kind == PipelineActionKind::kForward || a.kind == PipelineActionKind::kBackward) compute.push_back(a);
      ASSERT_EQ(stage.calls.size(), compute.size());
      std::map<std::pair<int, int>, int> slot_of;  // (micro-batch, chunk) -> its forward's slot
      std::map<int, std::size_t> last_backward;    // chunk -> index of its last backward
      for (std::size_t i = 0; i < compute.size(); ++i)
        if (compute[i].kind == PipelineActionKind::kBackward) last_backward[compute[i].virtual_stage / c.pp] = i;
      for (std::size_t i = 0; i < compute.size(); ++i) {
        const RecordingStage::Call& call = stage.calls[i];
        const int chunk = compute[i].virtual_stage / c.pp;
        EXPECT_EQ(call.forward, compute[i].kind == PipelineActionKind::kForward) << "call " << i;
        EXPECT_EQ(call.micro_batch, compute[i].micro_batch) << "call " << i;
        EXPECT_EQ(call.chunk, chunk) << "call " << i;
        EXPECT_GE(call.slot, 0);
        EXPECT_LT(call.slot, rehearsal.slots());
        if (call.forward) {
          slot_of[{call.micro_batch, chunk}] = call.slot;
        } else {
          EXPECT_EQ(call.slot, (slot_of[{call.micro_batch, chunk}])) << "backward " << i << " left its forward's slot";
          EXPECT_EQ(call.last_of_chunk, last_backward[chunk] == i) << "backward " << i;
        }
      }
    }
  }
}

TEST(PipelineRehearsal, RefusesARankOutsideTheSchedule) {
  const PipelineSchedule schedule = PipelineSchedule::build(PipelineScheduleKind::kOneFOneB, 2, 2, 1);
  EXPECT_THROW(PipelineExecutor(schedule, 2), Error);
  EXPECT_THROW(PipelineExecutor(schedule, -1), Error);
}

}  // namespace
}  // namespace strata
