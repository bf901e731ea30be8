// MeshShape: degree validation and rank <-> coordinate arithmetic.
#include "runtime/parallel/mesh_shape.h"

#include <fmt/format.h>

#include "core/error.h"

namespace strata {

const char* mesh_dim_name(MeshDim d) {
  switch (d) {
    case MeshDim::kPp: return "pp";
    case MeshDim::kDpReplicate: return "dp_replicate";
    case MeshDim::kDpShard: return "dp_shard";
    case MeshDim::kTp: return "tp";
    case MeshDim::kDp: return "dp";
  }
  return "?";
}

MeshShape::MeshShape(const MeshDims& dims, int world_size) {
  const std::string given = fmt::format("pp {} x dp_replicate {} x dp_shard {} x tp {}", dims.pp, dims.dp_replicate,
                                        dims.dp_shard, dims.tp);
  STRATA_CHECK(world_size >= 1, "mesh {}: world size {} must be at least 1", given, world_size);
  int* degree[4] = {&pp_, &dp_replicate_, &dp_shard_, &tp_};
  const int values[4] = {dims.pp, dims.dp_replicate, dims.dp_shard, dims.tp};
  int fill = -1, known = 1;
  for (int k = 0; k < 4; ++k) {
    if (values[k] == -1) {
      STRATA_CHECK(fill < 0, "mesh {} on {} ranks: only one degree may be -1 (the rest of the world)", given,
                   world_size);
      fill = k;
      continue;
    }
    STRATA_CHECK(values[k] >= 1, "mesh {} on {} ranks: every degree must be at least 1 (or -1 for the rest)", given,
                 world_size);
    *degree[k] = values[k];
    known *= values[k];
  }
  if (fill >= 0) {
    STRATA_CHECK(world_size % known == 0,
                 "mesh {} on {} ranks: the fixed degrees multiply to {}, which does not divide the world size", given,
                 world_size, known);
    *degree[fill] = world_size / known;
  }
  STRATA_CHECK(world_size == pp_ * dp_replicate_ * dp_shard_ * tp_,
               "mesh {} on {} ranks: the degrees multiply to {}, not the world size", given, world_size,
               pp_ * dp_replicate_ * dp_shard_ * tp_);
}

int MeshShape::degree(MeshDim d) const {
  switch (d) {
    case MeshDim::kPp: return pp_;
    case MeshDim::kDpReplicate: return dp_replicate_;
    case MeshDim::kDpShard: return dp_shard_;
    case MeshDim::kTp: return tp_;
    case MeshDim::kDp: return dp();
  }
  return 1;
}

MeshCoord MeshShape::coord(int rank) const {
  STRATA_CHECK(rank >= 0 && rank < world_size(), "rank {} is outside the mesh {}", rank, describe());
  MeshCoord c;
  c.tp = rank % tp_;
  rank /= tp_;
  c.dp_shard = rank % dp_shard_;
  rank /= dp_shard_;
  c.dp_replicate = rank % dp_replicate_;
  c.pp = rank / dp_replicate_;
  return c;
}

int MeshShape::rank_of(const MeshCoord& c) const {
  return ((c.pp * dp_replicate_ + c.dp_replicate) * dp_shard_ + c.dp_shard) * tp_ + c.tp;
}

int MeshShape::index(MeshDim d, int rank) const {
  const MeshCoord c = coord(rank);
  switch (d) {
    case MeshDim::kPp: return c.pp;
    case MeshDim::kDpReplicate: return c.dp_replicate;
    case MeshDim::kDpShard: return c.dp_shard;
    case MeshDim::kTp: return c.tp;
    case MeshDim::kDp: return c.dp_replicate * dp_shard_ + c.dp_shard;
  }
  return 0;
}

int MeshShape::group_id(MeshDim d, int rank) const {
  // The coordinates along the other dimensions, flattened in mesh order.
  const MeshCoord c = coord(rank);
  switch (d) {
    case MeshDim::kPp: return (c.dp_replicate * dp_shard_ + c.dp_shard) * tp_ + c.tp;
    case MeshDim::kDpReplicate: return (c.pp * dp_shard_ + c.dp_shard) * tp_ + c.tp;
    case MeshDim::kDpShard: return (c.pp * dp_replicate_ + c.dp_replicate) * tp_ + c.tp;
    case MeshDim::kTp: return (c.pp * dp_replicate_ + c.dp_replicate) * dp_shard_ + c.dp_shard;
    case MeshDim::kDp: return c.pp * tp_ + c.tp;
  }
  return 0;
}

std::vector<int> MeshShape::group_ranks(MeshDim d, int rank) const {
  const MeshCoord c = coord(rank);
  std::vector<int> out;
  for (int i = 0; i < degree(d); ++i) {
    MeshCoord m = c;
    switch (d) {
      case MeshDim::kPp: m.pp = i; break;
      case MeshDim::kDpReplicate: m.dp_replicate = i; break;
      case MeshDim::kDpShard: m.dp_shard = i; break;
      case MeshDim::kTp: m.tp = i; break;
      case MeshDim::kDp:
        m.dp_replicate = i / dp_shard_;
        m.dp_shard = i % dp_shard_;
        break;
    }
    out.push_back(rank_of(m));
  }
  return out;
}

std::string MeshShape::describe() const {
  return fmt::format("pp {} x dp_replicate {} x dp_shard {} x tp {} ({} ranks)", pp_, dp_replicate_, dp_shard_, tp_,
                     world_size());
}

}  // namespace strata
