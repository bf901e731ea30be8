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
    case MeshDim::kCp: return "cp";
    case MeshDim::kDpShardCp: return "dp_shard_cp";
    case MeshDim::kDpCp: return "dp_cp";
  }
  return "?";
}

namespace {

// "pp 1 x dp_replicate 2 x dp_shard 2 x tp 1", with "x cp C" before tp where cp is not 1.
std::string degrees_text(int pp, int r, int s, int cp, int tp) {
  return fmt::format("pp {} x dp_replicate {} x dp_shard {}{} x tp {}", pp, r, s,
                     cp == 1 ? std::string() : fmt::format(" x cp {}", cp), tp);
}

}  // namespace

MeshShape::MeshShape(const MeshDims& dims, int world_size) {
  const std::string given = degrees_text(dims.pp, dims.dp_replicate, dims.dp_shard, dims.cp, dims.tp);
  STRATA_CHECK(world_size >= 1, "mesh {}: world size {} must be at least 1", given, world_size);
  int* degree[5] = {&pp_, &dp_replicate_, &dp_shard_, &cp_, &tp_};
  const int values[5] = {dims.pp, dims.dp_replicate, dims.dp_shard, dims.cp, dims.tp};
  int fill = -1, known = 1;
  for (int k = 0; k < 5; ++k) {
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
  STRATA_CHECK(world_size == pp_ * dp_replicate_ * dp_shard_ * cp_ * tp_,
               "mesh {} on {} ranks: the degrees multiply to {}, not the world size", given, world_size,
               pp_ * dp_replicate_ * dp_shard_ * cp_ * tp_);
}

int MeshShape::degree(MeshDim d) const {
  switch (d) {
    case MeshDim::kPp: return pp_;
    case MeshDim::kDpReplicate: return dp_replicate_;
    case MeshDim::kDpShard: return dp_shard_;
    case MeshDim::kTp: return tp_;
    case MeshDim::kDp: return dp();
    case MeshDim::kCp: return cp_;
    case MeshDim::kDpShardCp: return dp_shard_ * cp_;
    case MeshDim::kDpCp: return dp() * cp_;
  }
  return 1;
}

MeshCoord MeshShape::coord(int rank) const {
  STRATA_CHECK(rank >= 0 && rank < world_size(), "rank {} is outside the mesh {}", rank, describe());
  MeshCoord c;
  c.tp = rank % tp_;
  rank /= tp_;
  c.cp = rank % cp_;
  rank /= cp_;
  c.dp_shard = rank % dp_shard_;
  rank /= dp_shard_;
  c.dp_replicate = rank % dp_replicate_;
  c.pp = rank / dp_replicate_;
  return c;
}

int MeshShape::rank_of(const MeshCoord& c) const {
  return (((c.pp * dp_replicate_ + c.dp_replicate) * dp_shard_ + c.dp_shard) * cp_ + c.cp) * tp_ + c.tp;
}

int MeshShape::index(MeshDim d, int rank) const {
  const MeshCoord c = coord(rank);
  switch (d) {
    case MeshDim::kPp: return c.pp;
    case MeshDim::kDpReplicate: return c.dp_replicate;
    case MeshDim::kDpShard: return c.dp_shard;
    case MeshDim::kTp: return c.tp;
    case MeshDim::kDp: return c.dp_replicate * dp_shard_ + c.dp_shard;
    case MeshDim::kCp: return c.cp;
    case MeshDim::kDpShardCp: return c.dp_shard * cp_ + c.cp;
    case MeshDim::kDpCp: return (c.dp_replicate * dp_shard_ + c.dp_shard) * cp_ + c.cp;
  }
  return 0;
}

int MeshShape::group_id(MeshDim d, int rank) const {
  // The coordinates along the other dimensions, flattened in mesh order.
  const MeshCoord c = coord(rank);
  switch (d) {
    case MeshDim::kPp: return ((c.dp_replicate * dp_shard_ + c.dp_shard) * cp_ + c.cp) * tp_ + c.tp;
    case MeshDim::kDpReplicate: return ((c.pp * dp_shard_ + c.dp_shard) * cp_ + c.cp) * tp_ + c.tp;
    case MeshDim::kDpShard: return ((c.pp * dp_replicate_ + c.dp_replicate) * cp_ + c.cp) * tp_ + c.tp;
    case MeshDim::kTp: return ((c.pp * dp_replicate_ + c.dp_replicate) * dp_shard_ + c.dp_shard) * cp_ + c.cp;
    case MeshDim::kDp: return (c.pp * cp_ + c.cp) * tp_ + c.tp;
    case MeshDim::kCp: return ((c.pp * dp_replicate_ + c.dp_replicate) * dp_shard_ + c.dp_shard) * tp_ + c.tp;
    case MeshDim::kDpShardCp: return (c.pp * dp_replicate_ + c.dp_replicate) * tp_ + c.tp;
    case MeshDim::kDpCp: return c.pp * tp_ + c.tp;
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
      case MeshDim::kCp: m.cp = i; break;
      case MeshDim::kDpShardCp:
        m.dp_shard = i / cp_;
        m.cp = i % cp_;
        break;
      case MeshDim::kDpCp:
        m.dp_replicate = i / (dp_shard_ * cp_);
        m.dp_shard = i / cp_ % dp_shard_;
        m.cp = i % cp_;
        break;
    }
    out.push_back(rank_of(m));
  }
  return out;
}

std::string MeshShape::describe() const {
  return fmt::format("{} ({} ranks)", degrees_text(pp_, dp_replicate_, dp_shard_, cp_, tp_), world_size());
}

}  // namespace strata
