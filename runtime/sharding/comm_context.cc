// CommContext: which data-parallel group does what under each ZeRO stage, and the communication streams.
#include "runtime/sharding/comm_context.h"

#include "core/error.h"
#include "core/logging.h"

namespace strata {

DataParallelGroups DataParallelGroups::of(const DeviceMesh& mesh) {
  // Context-parallel ranks hold the same parameters and reduce their gradients together: the state is sharded over
  // dp_shard x cp and averaged over dp x cp (torchtitan's dp_shard_cp), which at cp 1 are dp_shard and dp.
  return DataParallelGroups{&mesh.dp_shard_cp(), &mesh.dp_replicate(), &mesh.dp_cp()};
}

CommContext::CommContext(Device& device, const DataParallelGroups& groups, ZeroStage stage)
    : device_(device), dp_(groups.dp) {
  STRATA_CHECK(groups.dp && groups.shard && groups.replicate, "a sharded model needs its dp, dp_shard and "
               "dp_replicate groups (DataParallelGroups::of(mesh))");
  STRATA_CHECK(groups.shard->size() * groups.replicate->size() == groups.dp->size(),
               "dp_shard {} x dp_replicate {} must make the dp group of {} ranks", groups.shard->size(),
               groups.replicate->size(), groups.dp->size());
  if (stage != ZeroStage::kNone) {
    shard_ = groups.shard;
    if (groups.replicate->size() > 1) replica_ = groups.replicate;
    if (replica_)
      logger("shard").info("hybrid sharding: shard group '{}' ({} ranks), replica group '{}' ({} ranks)",
                           shard_->name(), shard_->size(), replica_->name(), replica_->size());
  }
  all_gather_stream_ = device.create_stream("all_gather");
  reduce_scatter_stream_ = device.create_stream("reduce_scatter");
}

Communicator& CommContext::shard_group() const {
  STRATA_CHECK(shard_ != nullptr, "ZeRO stage 0 has no shard group: gradients are all-reduced over '{}'",
               dp_->name());
  return *shard_;
}

std::vector<Communicator*> CommContext::partition_groups() const {
  if (shard_ && shard_->size() > 1) return {shard_};
  return {};
}

}  // namespace strata
