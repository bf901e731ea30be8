// DeviceMesh: the job's ranks as pp x dp_replicate x dp_shard x cp x tp, with every process group built once
// (torchtitan's ParallelDims, Megatron's parallel_state). Layers above take the groups they need from it and never
// re-derive a group from rank arithmetic. See docs/architecture.md, "The device mesh".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "runtime/parallel/mesh_shape.h"

namespace strata {

class Runtime;

class DeviceMesh {
 public:
  // Collective over `world`: validates the degrees against world.size() (an error on every rank naming them) and
  // builds each group through Communicator::split. A group of the whole world is `world` itself. `node_of_rank`
  // gives each world rank's node (any ids; empty: one node), so the mesh can say when a tp or dp_shard group spans
  // nodes (it logs a warning: their collectives then cross the network).
  DeviceMesh(Communicator& world, const MeshDims& dims, std::vector<int> node_of_rank = {});
  // The runtime's world communicator and node map.
  DeviceMesh(Runtime& runtime, const MeshDims& dims);
  ~DeviceMesh();
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  Communicator& world() const { return world_; }
  Device& device() const { return world_.device(); }
  MeshCoord coord() const { return shape_.coord(world_.rank()); }

  // This rank's group along `d`; its rank() is this rank's index along `d`.
  Communicator& group(MeshDim d) const;
  Communicator& pp() const { return group(MeshDim::kPp); }
  Communicator& dp_replicate() const { return group(MeshDim::kDpReplicate); }
  Communicator& dp_shard() const { return group(MeshDim::kDpShard); }
  Communicator& tp() const { return group(MeshDim::kTp); }
  Communicator& dp() const { return group(MeshDim::kDp); }
  // Context parallelism: the ranks that split one sequence, and the sharded model's groups with them (at cp 1 these
  // are dp_shard and dp themselves).
  Communicator& cp() const { return group(MeshDim::kCp); }
  Communicator& dp_shard_cp() const { return group(MeshDim::kDpShardCp); }
  Communicator& dp_cp() const { return group(MeshDim::kDpCp); }

  // Whether this rank's group along `d` holds ranks of more than one node.
  bool spans_nodes(MeshDim d) const;
  // The nodes of the world's ranks (by world rank) as given.
  const std::vector<int>& node_of_rank() const { return node_of_rank_; }
  // "mesh pp 1 x dp_replicate 2 x dp_shard 2 x tp 1 (4 ranks), 1 node; this rank (pp 0, dp_replicate 1, ...)"
  std::string describe() const;

 private:
  Communicator& world_;
  MeshShape shape_;
  std::vector<int> node_of_rank_;
  std::vector<std::unique_ptr<Communicator>> owned_;  // split groups (a whole-world group is `world_` itself)
  std::vector<Communicator*> groups_;                 // by MeshDim
};

}  // namespace strata
