// ShardLayout and ParamSlot: one flat buffer per unit, padded to shard_world x align; rank r owns one slice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/shape_string.h"
#include "runtime/parallel/tp_split.h"

namespace strata {

// What a trainer declares for one parameter.
struct SlotSpec {
  std::string name;
  std::vector<std::int64_t> shape;  // empty: a scalar; a zero dimension: a zero-size parameter
  bool weight_decay = true;
  bool trainable = true;  // false: frozen (no update, no optimizer state use)
  TpSplit tp{};            // this rank's tensor-parallel slice; `shape` is the local shape
};

// A parameter's place in its unit's flat buffer (llm.c's malloc_and_point_parameters, padded as FSDP2 pads).
struct ParamSlot {
  std::string name;
  std::vector<std::int64_t> shape;
  std::size_t numel = 0;
  std::size_t offset = 0;  // elements from the start of the flat buffer
  bool weight_decay = true;
  bool trainable = true;
  TpSplit tp{};  // shape is the local (this tp rank's) shape; tp.global_shape the whole tensor's
};

// A run of one slot's elements inside one rank's shard.
struct ShardSegment {
  std::size_t slot = 0;          // index into slots()
  std::size_t slot_begin = 0;    // first element within the slot
  std::size_t shard_begin = 0;   // first element within the shard
  std::size_t length = 0;
};

class ShardLayout {
 public:
  ShardLayout(const std::vector<SlotSpec>& specs, int shard_world, std::size_t align_elements);

  const std::vector<ParamSlot>& slots() const { return slots_; }
  int shard_world() const { return shard_world_; }
  std::size_t numel() const { return numel_; }                  // sum of slot sizes
  std::size_t padded_numel() const { return padded_numel_; }    // round_up(numel, shard_world * align)
  std::size_t shard_numel() const { return padded_numel_ / static_cast<std::size_t>(shard_world_); }
  std::size_t shard_offset(int shard_rank) const { return shard_numel() * static_cast<std::size_t>(shard_rank); }
  // The slot runs inside shard_rank's slice, in order; padding belongs to no slot.
  std::vector<ShardSegment> segments(int shard_rank) const;
  // Index of a slot by name; throws kInvalidArgument when absent.
  std::size_t find(const std::string& name) const;

 private:
  std::vector<ParamSlot> slots_;
  int shard_world_;
  std::size_t numel_ = 0;
  std::size_t padded_numel_ = 0;
};

std::size_t shape_numel(const std::vector<std::int64_t>& shape);

// One unit's shard. Pointers are in the memory of the unit's state (ShardedParameters::device()) and stay valid
// as long as the model.
struct UnitShard {
  const ShardLayout* layout = nullptr;  // the unit's slots (flags: trainable, weight_decay) and sizes
  float* master = nullptr;              // [shard_numel] this rank's f32 master elements
  float* grad = nullptr;                // [shard_numel] its gradients: averaged over dp, summed over micro-batches
  std::span<const ShardSegment> segments;  // the slot runs inside the shard, in order (padding belongs to none)
  std::size_t numel() const { return layout->shard_numel(); }
};

}  // namespace strata
