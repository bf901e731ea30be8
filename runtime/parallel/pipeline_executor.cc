// PipelineExecutor: one rank's schedule list, run in order; consecutive transfers go out as one batched group.
#include "runtime/parallel/pipeline_executor.h"

#include <algorithm>

#include "core/error.h"
#include "core/tracer.h"

namespace strata {

PipelineExecutor::PipelineExecutor(const PipelineSchedule& schedule, Communicator& pp, PipelineFaults faults)
    : schedule_(schedule), pp_(&pp), me_(pp.rank()), faults_(faults) {
  STRATA_CHECK(pp.size() == schedule.pp(), "the pp group has {} ranks; the {} schedule is for {}", pp.size(),
               pipeline_schedule_name(schedule.kind()), schedule.pp());
  stream_ = pp.device().create_stream("p2p");
  computed_ = pp.device().create_event();
  slots_ = std::max(1, schedule.max_in_flight(me_));
  slot_of_.assign(static_cast<std::size_t>(schedule.micro_batches() * schedule.virtual_stages()), -1);
}

PipelineExecutor::PipelineExecutor(const PipelineSchedule& schedule, int pp_rank)
    : schedule_(schedule), pp_(nullptr), me_(pp_rank) {
  STRATA_CHECK(pp_rank >= 0 && pp_rank < schedule.pp(), "a rehearsal of pp rank {}: the {} schedule has {} ranks",
               pp_rank, pipeline_schedule_name(schedule.kind()), schedule.pp());
  slots_ = std::max(1, schedule.max_in_flight(me_));
  slot_of_.assign(static_cast<std::size_t>(schedule.micro_batches() * schedule.virtual_stages()), -1);
}

PipelineExecutor::~PipelineExecutor() = default;

int PipelineExecutor::slot_for(int micro_batch, int chunk, bool create) {
  int& slot = slot_of_[static_cast<std::size_t>(micro_batch * schedule_.virtual_stages() + chunk)];
  if (slot < 0) {
    STRATA_CHECK(create, "pipeline: micro-batch {} of chunk {} has no activations (its forward has not run)",
                 micro_batch, chunk);
    STRATA_CHECK(!free_.empty(), "pipeline: more than {} micro-batches in flight on pp rank {}", slots_, me_);
    slot = free_.back();
    free_.pop_back();
  }
  return slot;
}

void PipelineExecutor::run_step(PipelineStage& stage) {
  const int P = schedule_.pp(), me = me_;
  const std::vector<PipelineAction>& list = schedule_.actions(me);
  std::fill(slot_of_.begin(), slot_of_.end(), -1);
  free_.clear();
  for (int s = slots_ - 1; s >= 0; --s) free_.push_back(s);
  groups_ = 0;
  bytes_sent_ = 0;
  // The index of each chunk's last backward in the list.
  std::vector<std::size_t> last_backward(static_cast<std::size_t>(schedule_.virtual_stages()), 0);
  for (std::size_t i = 0; i < list.size(); ++i)
    if (list[i].kind == PipelineActionKind::kBackward)
      last_backward[static_cast<std::size_t>(list[i].virtual_stage / P)] = i;
  for (const PipelineStep& step : schedule_.steps(me)) {
    if (step.transfer) {
      if (pp_) transfer(stage, step.actions);
      continue;
    }
    const PipelineAction& a = step.actions.front();
    const int chunk = a.virtual_stage / P;
    TraceSpan span(a.token(), "pipeline", "pipeline",
                   Tracer::global().enabled()
                       ? fmt::format(R"("micro_batch":{},"stage":{},"chunk":{})", a.micro_batch, a.virtual_stage, chunk)
                       : std::string());
    if (a.kind == PipelineActionKind::kForward) {
      stage.forward(a.micro_batch, chunk, slot_for(a.micro_batch, chunk, true));
    } else {
      const int slot = slot_for(a.micro_batch, chunk, false);
      stage.before_backward(a.micro_batch, chunk,
                            static_cast<std::size_t>(step.first) == last_backward[static_cast<std::size_t>(chunk)]);
      stage.backward(a.micro_batch, chunk, slot);
      slot_of_[static_cast<std::size_t>(a.micro_batch * schedule_.virtual_stages() + chunk)] = -1;
      free_.push_back(slot);
    }
  }
}

void PipelineExecutor::transfer(PipelineStage& stage, const std::vector<PipelineAction>& group) {
  const int P = schedule_.pp();
  const std::size_t count = stage.boundary_count();
  const DType dtype = stage.boundary_dtype();
  const bool drop_sends = faults_.drop_sends_of_pp_rank == me_;
  std::vector<P2POp> ops;
  std::string waits;  // what this group waits for, for a timeout's message
  for (const PipelineAction& a : group) {
    const bool send = a.kind == PipelineActionKind::kSendActivation || a.kind == PipelineActionKind::kSendGrad;
    if (send && drop_sends) continue;
    const int world_peer = pp_->world_ranks().empty() ? -1 : pp_->world_ranks()[static_cast<std::size_t>(a.peer)];
    waits += fmt::format("{}{} (world rank {}, micro-batch {})", waits.empty() ? "" : "; ", a.describe(), world_peer,
                         a.micro_batch);
    switch (a.kind) {
      case PipelineActionKind::kRecvActivation: {
        const int chunk = (a.virtual_stage + 1) / P;  // the stage that consumes it
        ops.push_back(P2POp::recv(stage.input(slot_for(a.micro_batch, chunk, true)), count, dtype, a.peer));
        break;
      }
      case PipelineActionKind::kSendActivation: {
        const int chunk = a.virtual_stage / P;
        ops.push_back(P2POp::send(stage.output(chunk, slot_for(a.micro_batch, chunk, false)), count, dtype, a.peer));
        bytes_sent_ += count * dtype_size(dtype);
        break;
      }
      case PipelineActionKind::kRecvGrad: ops.push_back(P2POp::recv(stage.grad_output(), count, dtype, a.peer)); break;
      case PipelineActionKind::kSendGrad:
        ops.push_back(P2POp::send(stage.grad_input(), count, dtype, a.peer));
        bytes_sent_ += count * dtype_size(dtype);
        break;
      default: break;
    }
  }
  if (ops.empty()) return;
  ++groups_;
  // The activations and gradients sent were computed on the compute stream.
  pp_->device().compute_stream().record(*computed_);
  stream_->wait(*computed_);
  try {
    pp_->batch_send_recv(ops, *stream_);
    stream_->synchronize();
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}\npipeline: pp rank {} of {} ({} schedule) was transferring: {}", e.what(),
                                      me_, P, pipeline_schedule_name(schedule_.kind()), waits));
  }
}

}  // namespace strata
