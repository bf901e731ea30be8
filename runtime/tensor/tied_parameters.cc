// TiedParameters: the group of the stages that hold a tied unit, and the sum of its copies' gradient shards.
#include "runtime/tensor/tied_parameters.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

TiedParameters::TiedParameters(const DeviceMesh& mesh, const std::vector<int>& stages, int unit,
                               const std::string& name)
    : unit_(unit) {
  Communicator& pp = mesh.pp();
  const bool mine = std::find(stages.begin(), stages.end(), pp.rank()) != stages.end();
  STRATA_CHECK(stages.size() >= 2, "tied parameters '{}': {} stage(s) listed; a tie needs two or more", name,
               stages.size());
  for (int s : stages)
    STRATA_CHECK(s >= 0 && s < pp.size(), "tied parameters '{}': stage {} is outside the pp group of {} ranks", name, s,
                 pp.size());
  STRATA_CHECK(mine == (unit >= 0), "tied parameters '{}': pp rank {} {} the stages listed but gives unit {}", name,
               pp.rank(), mine ? "is among" : "is not among", unit);
  group_ = pp.split(mine ? 0 : -1, pp.rank(), name);
}

TiedParameters::~TiedParameters() = default;

void TiedParameters::sum_grads(ShardedParameters& params) {
  if (!group_) return;
  params.wait_for_grads();
  const UnitShard shard = params.unit(unit_);
  Stream& stream = params.comm_stream();
  params.stream().synchronize();
  group_->all_reduce(shard.grad, shard.grad, shard.numel(), DType::kF32, ReduceOp::kSum, stream);
  params.wait(stream);
}

}  // namespace strata
