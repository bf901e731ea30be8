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

class BufferPool {
 public:
  static constexpr std::size_t kMinSlotBytes = 64;  // smaller slots are rounded up to this

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

}  // namespace strata
