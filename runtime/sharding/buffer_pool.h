// BufferPool: equal slots of one size (the largest unit's buffer), reused every step, so that after the first step
// no allocation happens inside a step and memory cannot fragment or creep. See docs/notes/prefetch.md.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"

namespace strata {

class FlatOps;

class BufferPool {
 public:
  // `initial_slots` are allocated now; more are allocated only when more are in use at once (the first step
  // finds the steady-state count), never freed until the pool goes.
  BufferPool(Device& device, std::string name, MemCategory category, std::size_t slot_bytes, int initial_slots);

  // A free slot. With `user`, that stream waits for the work recorded when the slot was last released (so a GPU
  // stream may reuse a slot another stream still read, without the host waiting).
  void* acquire(Stream* user = nullptr);
  // Returns a slot; with `after`, the slot's next user waits for the work enqueued on `after` so far.
  void release(void* slot, Stream* after = nullptr);
  std::size_t slot_bytes() const { return slot_bytes_; }
  int slots() const { return static_cast<int>(buffers_.size()); }
  int in_use() const { return static_cast<int>(buffers_.size() - free_.size()); }
  // Allocations made by the pool since construction (the initial slots included).
  int allocations() const { return static_cast<int>(buffers_.size()); }

 private:
  Device& device_;
  std::string name_;
  MemCategory category_;
  std::size_t slot_bytes_;
  std::vector<Buffer> buffers_;
  std::vector<void*> free_;
  std::map<void*, std::unique_ptr<Event>> released_;  // per slot: recorded at its last release(slot, after)
};

// A unit-sized buffer that is either owned (persistent state) or borrowed from a BufferPool (transient).
class PooledBuffer {
 public:
  void own(Buffer b);
  void borrow(BufferPool& pool, Stream* user = nullptr);  // see BufferPool::acquire
  void release(Stream* after = nullptr);  // frees an owned buffer, returns a borrowed slot (BufferPool::release)
  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  explicit operator bool() const { return data_ != nullptr || owned_; }

 private:
  Buffer owned_;
  BufferPool* pool_ = nullptr;
  void* data_ = nullptr;
};

// The pools (and, with offload, the host memory and upload stream) one ShardedModel shares among its units.
struct UnitPools {
  BufferPool* params = nullptr;      // gathered parameters (ZeRO-3)
  BufferPool* grads = nullptr;       // unsharded gradients (ZeRO-2/3, no-sync)
  BufferPool* reduce_in = nullptr;   // gradients converted to the reduce dtype
  BufferPool* reduce_out = nullptr;  // reduce-scatter / all-reduce outputs
  FlatOps* ops = nullptr;            // element-wise work on the device's memory (its streams)
  FlatOps* host_ops = nullptr;       // ... on host memory, ordered on the device's streams
  // Offload only (ShardingOptions::offload):
  Device* host = nullptr;               // host memory, with its own ledger
  Stream* upload = nullptr;             // the device stream that copies host -> device
  BufferPool* staged_shards = nullptr;  // device: parameter shards copied up for their gather (offload params)
  BufferPool* grad_return = nullptr;    // host: reduced gradient shards copied down from the device
  BufferPool* param_upload = nullptr;   // host: updated parameters cast to param dtype before their upload
};

}  // namespace strata
