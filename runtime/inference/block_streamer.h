// BlockStreamer: blocks of weights that do not stay in device memory, copied into a few device slots just ahead of
// their use, pass after pass, while the blocks before them compute (ZeRO-Inference's and FlexGen's weight streaming,
// accelerate's offload with a prefetch). The blocks are consumed in a fixed cyclic order, so every copy can be
// issued as soon as a slot frees.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/device.h"
#include "runtime/memory/inference_planner.h"

namespace strata {

class BlockStreamer {
 public:
  // Writes block `block`'s bytes (block_bytes of them) to `host_dst`, host memory. kHost calls it once per block, at
  // construction; kDisk every pass, on the upload stream (it must not call CUDA; an exception fails the pass that
  // waits for the block, with its message).
  using Fill = std::function<void(int block, void* host_dst)>;

  // The slots `count` blocks stream through with `prefetch_depth` of them copied ahead: min(depth + 1, count).
  static int slot_count(int prefetch_depth, int count);

  // `count` blocks of `block_bytes` (count >= 1), consumed 0, 1, ..., count - 1, then again from 0. kHost: every
  // block filled once into host memory (page-locked beside a CUDA device) and copied from there each pass; kDisk:
  // filled each pass, straight into its slot where the device's memory is the host's, else into page-locked staging
  // copied after. Slots and staging are `category` in the device's and the host's ledgers. The first slot_count()
  // copies are issued at once.
  BlockStreamer(Device& device, std::size_t block_bytes, int count, WeightSource source, int prefetch_depth, Fill fill,
                MemCategory category = MemCategory::kParamShard);
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
  std::uint64_t slot_bytes() const { return slots_.size() * block_bytes_; }  // device memory of the slots
  std::uint64_t bytes_streamed() const { return streamed_; }                  // copied into slots and consumed

 private:
  void issue();

  Device& dev_;
  std::size_t block_bytes_;
  int count_;
  WeightSource source_;
  Fill fill_;
  std::unique_ptr<Device> host_;                  // kHost's blocks, kDisk's staging (not beside a CPU device)
  std::vector<Buffer> host_blocks_, staging_;     // [count] (kHost), [slots] (kDisk, CUDA)
  std::vector<Buffer> slots_;
  std::vector<std::unique_ptr<Event>> loaded_, consumed_;  // per slot
  std::unique_ptr<Stream> upload_;
  std::uint64_t issued_ = 0, consumed_count_ = 0, streamed_ = 0;
  bool held_ = false;
};

}  // namespace strata
