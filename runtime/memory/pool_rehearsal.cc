// rehearse_pools and rehearse_unit_protocol: a step's unit calls on a one-rank model, its pools counted.
#include "runtime/memory/pool_rehearsal.h"

#include "collectives/self_communicator.h"
#include "core/cpu_device.h"
#include "core/env.h"
#include "core/error.h"
#include "runtime/parallel/pipeline_executor.h"

namespace strata {
namespace {

// Forwards and backwards of a pipeline rank's chunks over their units, for a rehearsal PipelineExecutor: no
// arithmetic, the boundary one element that nobody reads.
class ProtocolStage : public PipelineStage {
 public:
  ProtocolStage(ShardedModel& model, const UnitProtocol& protocol) : model_(model), protocol_(protocol) {}

  void forward(int, int chunk, int) override {
    for (int u = first(chunk); u < end(chunk); ++u) {
      model_.begin_forward(u);
      model_.end_forward(u);
    }
  }
  void before_backward(int, int, bool last_of_chunk) override {
    model_.set_requires_gradient_sync(protocol_.sync_every_micro_batch || last_of_chunk);
  }
  void backward(int, int chunk, int) override {
    for (int u = end(chunk) - 1; u >= first(chunk); --u) {
      model_.begin_backward(u);
      model_.end_backward(u);
    }
  }
  void* input(int) override { return &boundary_; }
  const void* output(int, int) override { return &boundary_; }
  void* grad_output() override { return &boundary_; }
  const void* grad_input() override { return &boundary_; }
  std::size_t boundary_count() const override { return 1; }
  DType boundary_dtype() const override { return DType::kF32; }

 private:
  int first(int chunk) const {
    return protocol_.chunk_first.empty() ? 0 : protocol_.chunk_first.at(static_cast<std::size_t>(chunk));
  }
  int end(int chunk) const {
    const std::size_t next = static_cast<std::size_t>(chunk) + 1;
    return next < protocol_.chunk_first.size() ? protocol_.chunk_first[next] : model_.num_units();
  }

  ShardedModel& model_;
  const UnitProtocol& protocol_;
  float boundary_ = 0;
};

}  // namespace

std::vector<UnitSpec> rehearsal_units(const std::vector<UnitSpec>& units) {
  std::vector<UnitSpec> out = units;
  for (UnitSpec& u : out)
    for (SlotSpec& s : u.slots) {
      bool empty = false;
      for (std::int64_t d : s.shape) empty = empty || d == 0;
      if (!s.shape.empty()) s.shape = {empty ? 0 : 1};
      s.tp = TpSplit{};
    }
  return out;
}

PoolPeaks pool_slots(const ShardedModel& model) {
  const UnitResources& pools = model.resources().for_units();
  auto slots = [&](UnitBuffer b) -> std::uint64_t {
    const BufferPool* p = pools.pools[static_cast<std::size_t>(b)];
    return p ? static_cast<std::uint64_t>(p->slots()) : 0;
  };
  return PoolPeaks{slots(UnitBuffer::kUnshardedParams), slots(UnitBuffer::kUnshardedGrads)};
}

PoolPeaks rehearse_pools(const std::vector<UnitSpec>& units, const ShardingOptions& options,
                         const RehearsalStep& step) {
  CpuDevice device(env().timeout_s, "rehearsal");
  SelfCommunicator self(device, "rehearsal");
  ShardedModel model(device, DataParallelGroups{&self, &self, &self}, units, options);
  step(model, self);
  model.parameters().wait_for_grads();
  return pool_slots(model);
}

PoolPeaks rehearse_unit_protocol(const std::vector<UnitSpec>& units, const ShardingOptions& options,
                                 const UnitProtocol& protocol, const PipelineSchedule* schedule, int pp_rank) {
  const int n = static_cast<int>(units.size());
  int previous = 0;
  for (std::size_t c = 0; c < protocol.chunk_first.size(); ++c) {
    const int first = protocol.chunk_first[c];
    STRATA_CHECK(first >= previous && first < n && (c > 0 || first == 0),
                 "rehearse_unit_protocol: chunk {} starts at unit {}; chunks start at 0, in order, within the {} units",
                 c, first, n);
    previous = first;
  }
  STRATA_CHECK(protocol.micro_batches >= 1, "rehearse_unit_protocol: {} micro-batches", protocol.micro_batches);
  const std::size_t chunks = protocol.chunk_first.empty() ? 1 : protocol.chunk_first.size();
  STRATA_CHECK(schedule == nullptr || static_cast<std::size_t>(schedule->virtual_stages()) == chunks,
               "rehearse_unit_protocol: the schedule gives each rank {} chunks; the protocol names {}",
               schedule ? schedule->virtual_stages() : 0, chunks);
  return rehearse_pools(rehearsal_units(units), options, [&](ShardedModel& model, Communicator&) {
    if (protocol.configure) protocol.configure(model);
    ProtocolStage stage(model, protocol);
    if (schedule) {
      model.set_is_last_backward(true);  // every forward of the step has its backward: each unit's last one reduces
      PipelineExecutor executor(*schedule, pp_rank);
      executor.run_step(stage);
      return;
    }
    for (int m = 0; m < protocol.micro_batches; ++m) {
      const bool last = m == protocol.micro_batches - 1;
      model.set_is_last_backward(last);
      stage.forward(m, 0, 0);
      stage.before_backward(m, 0, last);
      stage.backward(m, 0, 0);
    }
  });
}

}  // namespace strata
