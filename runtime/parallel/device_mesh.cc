// DeviceMesh: group construction through Communicator::split, and the node-spanning check.
#include "runtime/parallel/device_mesh.h"

#include <set>

#include "core/error.h"
#include "core/logging.h"
#include "runtime/bootstrap/runtime.h"

namespace strata {

DeviceMesh::DeviceMesh(Communicator& world, const MeshDims& dims, std::vector<int> node_of_rank)
    : world_(world), shape_(dims, world.size()), node_of_rank_(std::move(node_of_rank)) {
  if (node_of_rank_.empty()) node_of_rank_.assign(static_cast<std::size_t>(world.size()), 0);
  STRATA_CHECK(node_of_rank_.size() == static_cast<std::size_t>(world.size()),
               "the node map has {} entries for a world of {} ranks", node_of_rank_.size(), world.size());
  groups_.assign(kAllMeshDims.size(), nullptr);
  // Every rank splits for every dimension in the same order (split is collective over the world).
  for (MeshDim d : kAllMeshDims) {
    Communicator* g = &world_;
    if (shape_.cp() == 1 && (d == MeshDim::kDpShardCp || d == MeshDim::kDpCp)) {
      // Without context parallelism they are dp_shard and dp themselves (built before them): no second communicator.
      g = groups_[static_cast<std::size_t>(d == MeshDim::kDpShardCp ? MeshDim::kDpShard : MeshDim::kDp)];
    } else if (shape_.degree(d) != world.size()) {
      const int id = shape_.group_id(d, world.rank());
      owned_.push_back(world_.split(id, shape_.index(d, world.rank()), fmt::format("{}{}", mesh_dim_name(d), id)));
      g = owned_.back().get();
    }
    STRATA_CHECK_CODE(ErrorCode::kInternal, g->size() == shape_.degree(d) && g->rank() == shape_.index(d, world.rank()),
                      "mesh {}: the {} group has rank {} of {}, expected {} of {}", shape_.describe(),
                      mesh_dim_name(d), g->rank(), g->size(), shape_.index(d, world.rank()), shape_.degree(d));
    groups_[static_cast<std::size_t>(d)] = g;
  }
  if (world.rank() == 0) {
    // Rank 0 checks every group of the dimensions whose collectives sit on the critical path of each layer.
    for (MeshDim d : {MeshDim::kTp, MeshDim::kDpShard, MeshDim::kCp}) {
      for (int r = 0; r < world.size(); ++r) {
        if (shape_.index(d, r) != 0) continue;  // one check per group
        std::set<int> nodes;
        for (int member : shape_.group_ranks(d, r)) nodes.insert(node_of_rank_[static_cast<std::size_t>(member)]);
        if (nodes.size() > 1) {
          logger("mesh").warn("mesh {}: the {} group of ranks {} spans {} nodes; its collectives cross the network "
                              "(keep {} within the ranks of one node)",
                              shape_.describe(), mesh_dim_name(d), fmt::join(shape_.group_ranks(d, r), ","),
                              nodes.size(), mesh_dim_name(d));
          break;
        }
      }
    }
  }
  logger("mesh").info("{}", describe());
}

DeviceMesh::DeviceMesh(Runtime& runtime, const MeshDims& dims)
    : DeviceMesh(runtime.world(), dims, runtime.node_of_rank()) {}

DeviceMesh::~DeviceMesh() = default;

Communicator& DeviceMesh::group(MeshDim d) const { return *groups_[static_cast<std::size_t>(d)]; }

bool DeviceMesh::spans_nodes(MeshDim d) const {
  std::set<int> nodes;
  for (int member : shape_.group_ranks(d, world_.rank())) nodes.insert(node_of_rank_[static_cast<std::size_t>(member)]);
  return nodes.size() > 1;
}

std::string DeviceMesh::describe() const {
  const std::set<int> nodes(node_of_rank_.begin(), node_of_rank_.end());
  const MeshCoord c = coord();
  return fmt::format("mesh {}, {} node{}; this rank (pp {}, dp_replicate {}, dp_shard {}, {}tp {})", shape_.describe(),
                     nodes.size(), nodes.size() == 1 ? "" : "s", c.pp, c.dp_replicate, c.dp_shard,
                     shape_.cp() > 1 ? fmt::format("cp {}, ", c.cp) : std::string(), c.tp);
}

}  // namespace strata
