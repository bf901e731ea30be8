// MeshShape: the degrees pp x dp_replicate x dp_shard x cp x tp of a device mesh and the arithmetic between a rank and
// its coordinates. No communication: DeviceMesh builds the groups from it.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace strata {

// The mesh's dimensions, outermost first. tp is innermost, so a tensor-parallel group is consecutive ranks (on one
// node when tp divides the ranks per node); pp is outermost. kDp is not a dimension of its own: it is the
// combined data-parallel group dp_replicate x dp_shard (the ranks that hold the same tp slice of the same stage).
// kDp: the data-parallel ranks (dp_replicate x dp_shard: they read different rows). With context parallelism (cp, the
// sequence split over ranks that hold the same parameters), the sharded model's groups take cp in as torchtitan's
// do: kDpShardCp (dp_shard x cp) shards the state, kDpCp (dp_replicate x dp_shard x cp) averages the gradients.
enum class MeshDim { kPp, kDpReplicate, kDpShard, kTp, kDp, kCp, kDpShardCp, kDpCp };
constexpr std::array<MeshDim, 8> kAllMeshDims = {MeshDim::kPp, MeshDim::kDpReplicate, MeshDim::kDpShard, MeshDim::kTp,
                                                 MeshDim::kDp, MeshDim::kCp, MeshDim::kDpShardCp, MeshDim::kDpCp};
const char* mesh_dim_name(MeshDim d);  // "pp", "dp_replicate", "dp_shard", "tp", "dp", "cp", "dp_shard_cp", "dp_cp"

// Degrees as a user gives them: at most one may be -1 ("the rest of the world"). cp comes last here so that the
// four-degree form {pp, dp_replicate, dp_shard, tp} keeps its meaning; in the mesh it sits between dp_shard and tp.
struct MeshDims {
  int pp = 1;
  int dp_replicate = 1;
  int dp_shard = -1;
  int tp = 1;
  int cp = 1;
};

// A rank's place in the mesh: rank = (((pp * dp_replicate + r) * dp_shard + s) * cp + c) * tp + t.
struct MeshCoord {
  int pp = 0;
  int dp_replicate = 0;
  int dp_shard = 0;
  int tp = 0;
  int cp = 0;
};

class MeshShape {
 public:
  // Resolves a -1 and checks that the degrees multiply to the world size; throws kInvalidArgument naming every
  // degree and the world size otherwise (a product that differs, -1 twice, a degree < 1, a -1 that does not divide).
  MeshShape(const MeshDims& dims, int world_size);

  int pp() const { return pp_; }
  int dp_replicate() const { return dp_replicate_; }
  int dp_shard() const { return dp_shard_; }
  int tp() const { return tp_; }
  int cp() const { return cp_; }
  int dp() const { return dp_replicate_ * dp_shard_; }
  int world_size() const { return pp_ * dp() * cp_ * tp_; }
  // The number of ranks in one group along `d`.
  int degree(MeshDim d) const;

  MeshCoord coord(int rank) const;
  int rank_of(const MeshCoord& c) const;
  // This rank's index in its group along `d` (for kDp: r * dp_shard + s; the flattened groups in mesh order).
  int index(MeshDim d, int rank) const;
  // Which group along `d` the rank belongs to: equal for the ranks of one group, different across groups, in
  // [0, world / degree).
  int group_id(MeshDim d, int rank) const;
  // The world ranks of `rank`'s group along `d`, ordered by their index in it.
  std::vector<int> group_ranks(MeshDim d, int rank) const;

  // "pp 1 x dp_replicate 2 x dp_shard 2 x tp 1 (4 ranks)", with "x cp C" before tp where cp > 1.
  std::string describe() const;

 private:
  int pp_ = 1, dp_replicate_ = 1, dp_shard_ = 1, tp_ = 1, cp_ = 1;
};

}  // namespace strata
