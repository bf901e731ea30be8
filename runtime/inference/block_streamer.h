// BlockStreamer: blocks of weights that do not stay in device memory, copied into a few device slots just ahead of
// their use, pass after pass, while the blocks before them compute (ZeRO-Inference's and FlexGen's weight streaming,
// accelerate's offload with a prefetch). The blocks are consumed in a fixed cyclic order, so every copy can be
// issued as soon as a slot frees. Over a shard group, each rank holds or fetches one part of every block and the group
// all-gathers the block into each one's slot (ZeRO-Inference's multi-device fetch; ZeRO-3's gather per unit when the
// parts live in device memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "core/device.h"
#include "runtime/memory/inference_planner.h"

namespace strata {

class BlockStreamer {
 public:
  // Writes bytes [begin, begin + bytes) of block `block` to `host_dst`, host memory: the whole block (begin 0), or
  // under a shard group this rank's part of it. kHost and kDevice call it once per block, at construction; kDisk
  // every pass, on the upload streams (it must not call CUDA; an exception fails the pass that waits for the block,
  // with its message). kDisk reads two blocks at once where there are two slots or more, each on its own stream, so
  // that one's cold reads wait while the other's proceed: it must be safe to call from two threads at once.
  using Fill = std::function<void(int block, std::size_t begin, std::size_t bytes, void* host_dst)>;

  // The slots `count` blocks stream through with `prefetch_depth` of them copied ahead: min(depth + 1, count).
  static int slot_count(int prefetch_depth, int count);
  // `count` blocks of `block_bytes` (count >= 1), consumed 0, 1, ..., count - 1, then again from 0. kHost: every
  // block filled once into host memory (page-locked beside a CUDA device) and copied from there each pass; kDisk:
  // filled each pass, straight into its slot where the device's memory is the host's, else into page-locked staging
  // copied after (copy t on upload stream t % 2 where there are two slots or more, else on the one). Slots and staging
  // are `category` in the device's and the host's ledgers. The first slot_count() copies are issued at once.
  // `shard` (size N > 1): this rank holds or fetches only part shard_part(block_bytes, N) of each block, bytes
  // [rank x part, + part) (zero past the block's end), and after it arrives the group all-gathers the N parts into the
  // slot on the upload stream; kDevice keeps the parts in device memory (it needs a group). Every rank of the group
  // must construct together and acquire the same blocks equally often (an idle pass acquires and releases them too).
  BlockStreamer(Device& device, std::size_t block_bytes, int count, WeightSource source, int prefetch_depth, Fill fill,
                MemCategory category = MemCategory::kParamShard, Communicator* shard = nullptr);
  // Waits for the copies in flight (their failures are dropped: a pass that needed them has reported them).
  ~BlockStreamer();
  BlockStreamer(const BlockStreamer&) = delete;
  BlockStreamer& operator=(const BlockStreamer&) = delete;

  // Block `block`'s bytes in device memory, once its copy has arrived: the device's compute stream waits for it.
  // `block` must be the next in the cyclic order (kInternal otherwise), and the one acquired before it released.
  const void* acquire(int block);
  // The compute stream's work on the block acquired last is enqueued: its slot takes the copy slot_count() ahead.
  void release();

  int slots() const { return static_cast<int>(slots_.size()); }
  // Host threads that keep copying or reading for the stream while the passes compute: every upload stream on a CPU
  // device (its copies run on the host's cores), the disk readers beside a GPU (whose copy engine does the rest).
  int host_copy_threads() const;
  std::uint64_t slot_bytes() const { return slots_.size() * slot_size_; }  // device memory of the slots
  std::uint64_t part_bytes() const { return part_; }                       // this rank's share of a block
  // kDevice: the parts this rank keeps in device memory.
  std::uint64_t held_bytes() const { return source_ == WeightSource::kDevice ? count_ * part_ : 0; }
  // Of the blocks consumed so far: what this rank copied into device memory from host memory or disk (its parts),
  // and what it received from the group's other ranks (theirs).
  std::uint64_t bytes_streamed() const { return source_ == WeightSource::kDevice ? 0 : consumed_count_ * part_; }
  std::uint64_t bytes_gathered() const { return consumed_count_ * (slot_size_ - part_); }

 private:
  void issue();
  // This rank's part of block `block` into `dst` (host memory), zero past the block's end.
  void fill_part(int block, void* dst);

  Device& dev_;
  std::size_t block_bytes_;
  int count_;
  WeightSource source_;
  Fill fill_;
  Communicator* shard_;  // null: whole blocks
  int shards_ = 1, shard_rank_ = 0;
  std::size_t part_, slot_size_;  // this rank's bytes of a block; a slot's (every part)
  std::unique_ptr<Device> host_;           // kHost's parts, kDisk's staging (not beside a CPU device)
  std::vector<Buffer> parts_, staging_;    // [count] (kHost in host memory, kDevice in device memory), [slots] (kDisk)
  std::vector<Buffer> slots_;
  std::vector<std::unique_ptr<Event>> loaded_, consumed_;  // per slot
  std::vector<std::unique_ptr<Stream>> uploads_;  // copy t on uploads_[t % size]
  std::uint64_t issued_ = 0, consumed_count_ = 0;
  bool held_ = false;
};

}  // namespace strata
