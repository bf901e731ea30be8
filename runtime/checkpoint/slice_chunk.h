// SliceChunk: where a rank's local elements of a tensor-parallel parameter lie in the global tensor, as the boxes a
// checkpoint stores them in (docs/checkpoint.md, "Tensor-parallel slices"). A tp rank's slice of a slot split in one
// part is one box of the global tensor (clipped where the split dimension is padded); a slot split in `parts` blocks
// (a fused q|k|v projection) is one box per part. Any run of local elements is then, in each box, one flat range of
// the box's row-major elements, though not always one run of local memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/parallel/tp_split.h"

namespace strata {

// Local elements [begin, begin + length) of a slot.
struct LocalRun {
  std::size_t begin = 0;
  std::size_t length = 0;
};

// Elements [begin, begin + count) of one box of the global tensor, and the local runs that hold them, in order.
struct SliceChunk {
  std::vector<std::int64_t> box_offset;
  std::vector<std::int64_t> box_shape;
  std::uint64_t begin = 0;
  std::uint64_t count = 0;
  std::vector<LocalRun> local;  // one run unless the box's rows are strided in local memory (q|k|v, say)
};

// The chunks of local elements [begin, begin + count) of tp rank `rank` of `tp`, for a slot of local shape
// `local_shape` split as `split`: one per part of the split that the range touches, in order of the parts; none for
// padding, nor, with `owned_only`, for a piece another rank owns (a shared atom, TpGeometry::owns). Replicated, or at
// tp 1: one chunk of the whole tensor, local == global.
std::vector<SliceChunk> slice_chunks(const TpSplit& split, const std::vector<std::int64_t>& local_shape, int rank,
                                     int tp, std::size_t begin, std::size_t count, bool owned_only = false);

}  // namespace strata
