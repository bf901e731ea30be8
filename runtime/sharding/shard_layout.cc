// ShardLayout: slot offsets, padding, and the slot segments of each shard.
#include "runtime/sharding/shard_layout.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace strata {

std::size_t shape_numel(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (auto d : shape) {
    STRATA_CHECK(d >= 0, "negative dimension {} in shape", d);
    n *= static_cast<std::size_t>(d);
  }
  return n;
}

ShardLayout::ShardLayout(const std::vector<SlotSpec>& specs, int shard_world, std::size_t align_elements)
    : shard_world_(shard_world) {
  STRATA_CHECK(shard_world >= 1, "shard world {} must be at least 1", shard_world);
  STRATA_CHECK(align_elements >= 1, "alignment {} must be at least 1", align_elements);
  for (const SlotSpec& s : specs) {
    STRATA_CHECK(!s.name.empty(), "a parameter has no name");
    for (const ParamSlot& existing : slots_) STRATA_CHECK(existing.name != s.name, "parameter '{}' declared twice", s.name);
    ParamSlot slot;
    slot.name = s.name;
    slot.shape = s.shape;
    slot.numel = shape_numel(s.shape);
    slot.offset = numel_;
    slot.weight_decay = s.weight_decay;
    slot.trainable = s.trainable;
    slot.tp = s.tp;
    numel_ += slot.numel;
    slots_.push_back(std::move(slot));
  }
  std::size_t quantum = static_cast<std::size_t>(shard_world) * align_elements;
  padded_numel_ = (numel_ + quantum - 1) / quantum * quantum;
}

std::vector<ShardSegment> ShardLayout::segments(int shard_rank) const {
  std::size_t begin = shard_offset(shard_rank), end = begin + shard_numel();
  std::vector<ShardSegment> out;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const ParamSlot& s = slots_[i];
    std::size_t lo = std::max(begin, s.offset), hi = std::min(end, s.offset + s.numel);
    if (lo >= hi) continue;
    out.push_back(ShardSegment{i, lo - s.offset, lo - begin, hi - lo});
  }
  return out;
}

std::size_t ShardLayout::find(const std::string& name) const {
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].name == name) return i;
  STRATA_THROW(ErrorCode::kInvalidArgument, "no parameter named '{}'", name);
}

}  // namespace strata
