// PipelineExecutor: runs one rank's list of a PipelineSchedule for one step: its forwards and backwards through a
// PipelineStage, its transfers as batched point-to-point groups over the pp communicator on a stream of their own.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "core/device.h"
#include "runtime/parallel/pipeline_schedule.h"

namespace strata {

// What the executor asks of the model part on this rank. `chunk` is the rank's chunk (stage / P); `slot` the
// activation slot in [0, slots()) the executor gives a (micro-batch, chunk) pair from its forward (or the receive
// before it) until its backward ends.
class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  virtual void forward(int micro_batch, int chunk, int slot) = 0;
  virtual void backward(int micro_batch, int chunk, int slot) = 0;
  // Where the activation from the previous stage is received, for the forward of `slot`.
  virtual void* input(int slot) = 0;
  // The chunk's output after its forward, sent to the next stage.
  virtual const void* output(int chunk, int slot) = 0;
  // Where the gradient of a chunk's output is received, for the backward that follows.
  virtual void* grad_output() = 0;
  // d loss / d the chunk's input after its backward, sent to the previous stage (valid until the next backward).
  virtual const void* grad_input() = 0;
  // Elements and type of one activation (and of its gradient).
  virtual std::size_t boundary_count() const = 0;
  virtual DType boundary_dtype() const = 0;
  // Called before each backward with whether it is the last backward of (chunk) in this step.
  virtual void before_backward(int /*micro_batch*/, int /*chunk*/, bool /*last_of_chunk*/) {}
};

// Fault injection for the tests (STRATA_FAULT=pp-no-send:R): pp rank R drops its sends.
struct PipelineFaults {
  int drop_sends_of_pp_rank = -1;
};

class PipelineExecutor {
 public:
  // `pp`: the pipeline group (rank i of it runs the schedule's list i). The schedule must be validated.
  PipelineExecutor(const PipelineSchedule& schedule, Communicator& pp, PipelineFaults faults = {});
  // A rehearsal of pp rank `pp_rank`, with no group: run_step runs that rank's forwards and backwards in its list's
  // order, with the slots and last-of-chunk marks a real step gives them, and skips every transfer (the stage's
  // inputs hold whatever its buffers held). One process so replays what any rank of the pipeline holds at each point
  // of its step (the GPT memory planner counts its pools so).
  PipelineExecutor(const PipelineSchedule& schedule, int pp_rank);
  ~PipelineExecutor();

  // Activation slots this rank needs: the most (micro-batch, chunk) pairs in flight.
  int slots() const { return slots_; }
  const PipelineSchedule& schedule() const { return schedule_; }
  // Runs the list once. A transfer that does not complete within the communicator's timeout throws kTimeout naming
  // this rank, the peer, the micro-batch and the stage it waited for.
  void run_step(PipelineStage& stage);
  // Transfers of the last step (this rank): groups issued and bytes sent.
  std::size_t last_groups() const { return groups_; }
  std::size_t last_bytes_sent() const { return bytes_sent_; }

 private:
  void transfer(PipelineStage& stage, const std::vector<PipelineAction>& group);
  int slot_for(int micro_batch, int chunk, bool create);

  const PipelineSchedule& schedule_;
  Communicator* pp_;  // null in a rehearsal
  int me_;            // the pp rank whose list runs
  PipelineFaults faults_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Event> computed_;
  int slots_ = 1;
  std::vector<int> slot_of_;   // per (micro_batch * V + chunk): its slot, or -1
  std::vector<int> free_;      // free slots
  std::size_t groups_ = 0, bytes_sent_ = 0;
};

}  // namespace strata
