// TiedParameters: one unit whose copies live on several pipeline stages (GPT's token embeddings, which the first
// stage looks up and the last uses as the LM head) and the group, split from the mesh's pp group, that sums the
// copies' gradients so that each holds the whole model's gradient. Every copy has the same layout, so shard i of one
// is shard i of the other: the sum is element-wise over the gradient shards.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/sharding/sharded_parameters.h"

namespace strata {

class TiedParameters {
 public:
  // Collective over mesh.pp(): `stages` (pp ranks, at least two) hold a copy; `unit` is this rank's copy, -1 on a
  // stage that holds none (which must not be listed).
  TiedParameters(const DeviceMesh& mesh, const std::vector<int>& stages, int unit, const std::string& name);
  ~TiedParameters();
  // The unit this stage holds a copy of (-1: none), and the group of the stages that do (nullptr elsewhere).
  int unit() const { return unit_; }
  Communicator* group() const { return group_.get(); }
  // After the step's backward, before the optimizer reads the gradients: waits for the reductions and sums the
  // copies' gradient shards over the group (f32, on the optimizer's stream). A stage without a copy does nothing.
  void sum_grads(ShardedParameters& params);

 private:
  int unit_ = -1;
  std::unique_ptr<Communicator> group_;
};

}  // namespace strata
