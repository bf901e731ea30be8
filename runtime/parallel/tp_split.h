// TpSplit: how a parameter is cut across the tensor-parallel group, and where a tp rank's local elements sit in the
// global tensor (Megatron's column- and row-parallel slices). The optimizer uses it to count every element of the
// full model once, checkpoints to write each local run at its place in the global tensor, and the model's init to
// draw each element from its global index (so the init does not depend on the tp degree).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace strata {

// A split tensor seen row-major as (outer, j, inner), j its index along the split dimension: the sizes that place a
// rank's elements (for_each_global_run, checkpoint boxes). Along the split dimension the tensor is parts in order,
// each cut into tp pieces: part p spans global indices [global_begin[p], global_begin[p] + block[p]) and this rank's
// piece of it local indices [local_begin[p], local_begin[p] + piece[p]). A part cut into fewer pieces than tp ranks
// (TpSplit::atom) has each piece held by share[p] consecutive ranks.
struct TpGeometry {
  std::size_t inner = 1;  // elements after the split dimension
  std::size_t global = 0;  // the split dimension's global size
  std::size_t local = 0;   // and its local size (every part's piece)
  std::vector<std::size_t> block, piece, global_begin, local_begin, share;  // per part
  // The first index along the split dimension of tp rank `rank`'s piece of part p, within the part.
  std::size_t first(std::size_t p, int rank) const { return static_cast<std::size_t>(rank) / share[p] * piece[p]; }
  // Whether tp rank `rank` is the first of the ranks holding its piece of part p (the one that saves it and counts
  // it in the gradient norm).
  bool owns(std::size_t p, int rank) const { return static_cast<std::size_t>(rank) % share[p] == 0; }
  // The part holding local index j along the split dimension.
  std::size_t part_of_local(std::size_t j) const;
  // The part holding global index j along the split dimension.
  std::size_t part_of_global(std::size_t j) const;
};

struct TpSplit {
  TpSplit() = default;
  TpSplit(int dim_, int parts_, std::vector<std::int64_t> global_shape_, std::vector<std::int64_t> part_sizes_ = {},
          std::int64_t atom_ = 0)
      : dim(dim_),
        parts(parts_),
        global_shape(std::move(global_shape_)),
        part_sizes(std::move(part_sizes_)),
        atom(atom_) {}
  // The dimension of the global shape cut into tp pieces; -1: replicated (every tp rank holds all of it).
  int dim = -1;
  // The split dimension is `parts` equal blocks, each cut into tp pieces, and a rank's local tensor holds its piece of
  // every block in order (3 for a fused q|k|v projection: each rank holds its heads of q, of k and of v).
  int parts = 1;
  // The global shape. Along `dim` it may be smaller than tp x the local size: the local tensors are padded at the
  // end (a vocabulary not divisible by tp); padded elements have no global place. Empty when replicated.
  std::vector<std::int64_t> global_shape;
  // Parts of unequal sizes along `dim`, in order, in place of `parts` equal ones (grouped-query attention's fused
  // q | k | v: its query heads' width, then the key-value heads' twice); each divides by tp (no padding). Empty: the
  // `parts` equal blocks.
  std::vector<std::int64_t> part_sizes;
  // The smallest piece a part may be cut into along `dim` (a head's width), 0: any. A part of n such atoms at a tp
  // degree above n is cut into n pieces, each held whole by tp / n consecutive tp ranks, its gradient summed over
  // them (key-value heads shared by the query heads of several tp ranks, as Megatron-LM replicates query groups).
  std::int64_t atom = 0;

  bool replicated() const { return dim < 0; }
  // "replicated", "dim 1 in 3 parts of [32, 96]" or "dim 1 in parts 32 + 16 + 16 of [32, 64]" (", atoms of 8").
  std::string describe() const;
  // The local shape at tp degree `tp` (global along `dim` / (parts * tp), rounded up, times parts; with part_sizes the
  // sum of each part / tp, a part of fewer atoms than tp ranks counting one atom).
  std::vector<std::int64_t> local_shape(int tp) const;
  // The sizes of a split tensor at degree `tp` (not for a replicated one).
  TpGeometry geometry(int tp) const;
  // kInvalidArgument naming `what` when the split cannot be taken at degree `tp` (dim out of range, a block size not
  // divisible, parts > 1 with padding, part sizes that do not add up to the dimension or do not divide by tp, nor,
  // with atoms, into atoms whose count divides tp or is divided by it).
  void validate(const std::string& what, int tp) const;
};

// Calls fn(local_begin, global_begin, length) for each maximal run of local elements [begin, begin + count) of tp
// rank `rank` (of `tp`) whose global indices (row-major, global shape) are consecutive. Padded elements are skipped,
// and with `owned_only` the pieces another rank owns (TpGeometry::owns: a shared atom held by an earlier rank).
// Replicated: one run, local == global.
void for_each_global_run(const TpSplit& split, int rank, int tp, std::size_t begin, std::size_t count,
                         const std::function<void(std::size_t local_begin, std::size_t global_begin,
                                                  std::size_t length)>& fn,
                         bool owned_only = false);

}  // namespace strata
