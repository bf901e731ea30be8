// SliceChunk: a local range of a tp slice as flat ranges of the boxes of its parts.
#include "runtime/checkpoint/slice_chunk.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

std::vector<SliceChunk> slice_chunks(const TpSplit& split, const std::vector<std::int64_t>& local_shape, int rank,
                                     int tp, std::size_t begin, std::size_t count, bool owned_only) {
  if (count == 0) return {};
  if (split.replicated() || tp == 1) {
    const std::vector<std::int64_t>& shape = split.replicated() ? local_shape : split.global_shape;
    return {SliceChunk{std::vector<std::int64_t>(shape.size(), 0), shape, begin, count, {LocalRun{begin, count}}}};
  }
  // As in for_each_global_run: an element of the global tensor is (outer, j, inner) with j its index along `dim`.
  const std::vector<std::int64_t>& g = split.global_shape;
  const std::size_t d = static_cast<std::size_t>(split.dim);
  const TpGeometry geo = split.geometry(tp);
  const std::size_t inner = geo.inner, G = geo.global;
  std::vector<SliceChunk> by_part(geo.block.size());
  // A run of one part's elements.
  auto place = [&](std::size_t local, std::size_t global, std::size_t n) {
    const std::size_t o = global / (G * inner), j = global / inner % G, i = global % inner;
    const std::size_t p = geo.part_of_global(j);
    // Part p's box: this rank's indices of part p along `dim`, clipped where the part ends (padding).
    const std::size_t first = geo.first(p, rank);  // this rank's first index in part p
    const std::size_t offset = geo.global_begin[p] + first, width = std::min(geo.piece[p], geo.block[p] - first);
    const std::uint64_t flat = (o * width + (j - offset)) * inner + i;
    SliceChunk& c = by_part[p];
    if (c.count == 0) {
      c.box_offset.assign(g.size(), 0);
      c.box_offset[d] = static_cast<std::int64_t>(offset);
      c.box_shape = g;
      c.box_shape[d] = static_cast<std::int64_t>(width);
      c.begin = flat;
    }
    // A run of local elements meets each part's box in one interval of its row-major order (the order of the box's
    // elements is the local order with the part fixed), so the runs of one part follow each other.
    STRATA_CHECK_CODE(ErrorCode::kInternal, c.begin + c.count == flat,
                      "tp slice: local run at {} lands at element {} of part {}'s box, expected {}", local, flat, p,
                      c.begin + c.count);
    c.count += n;
    if (!c.local.empty() && c.local.back().begin + c.local.back().length == local)
      c.local.back().length += n;
    else
      c.local.push_back(LocalRun{local, n});
  };
  // A run may go on into the next part (a piece as wide as its part, shared by several ranks, ends where this rank's
  // piece of the next part begins): each part's share of it is placed on its own.
  auto chunk = [&](std::size_t local, std::size_t global, std::size_t n) {
    while (n > 0) {
      const std::size_t j = global / inner % G, p = geo.part_of_global(j);
      const std::size_t m = std::min(n, (geo.global_begin[p] + geo.block[p] - j) * inner - global % inner);
      place(local, global, m);
      local += m;
      global += m;
      n -= m;
    }
  };
  for_each_global_run(split, rank, tp, begin, count, chunk, owned_only);
  std::vector<SliceChunk> out;
  for (SliceChunk& c : by_part)
    if (c.count > 0) out.push_back(std::move(c));
  return out;
}

}  // namespace strata
