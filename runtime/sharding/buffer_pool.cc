// BufferPool: a free list of equal slots.
#include "runtime/sharding/buffer_pool.h"

#include <algorithm>

#include "core/error.h"
#include "core/logging.h"

namespace strata {

BufferPool::BufferPool(Device& device, std::string name, MemCategory category, std::size_t slot_bytes,
                       int initial_slots)
    : device_(device), name_(std::move(name)), category_(category), slot_bytes_(std::max(slot_bytes, kMinSlotBytes)) {
  for (int i = 0; i < initial_slots; ++i) {
    buffers_.push_back(device_.allocate(slot_bytes_, category_));
    free_.push_back(buffers_.back().data());
  }
}

void* BufferPool::acquire(Stream* user) {
  if (free_.empty()) {
    buffers_.push_back(device_.allocate(slot_bytes_, category_));
    logger("mem").debug("pool '{}' grew to {} slots of {} bytes", name_, buffers_.size(), slot_bytes_);
    return buffers_.back().data();
  }
  void* p = free_.back();
  free_.pop_back();
  auto it = released_.find(p);
  if (user && it != released_.end()) user->wait(*it->second);
  return p;
}

void BufferPool::release(void* slot, Stream* after) {
  if (!slot) return;
  STRATA_CHECK(std::any_of(buffers_.begin(), buffers_.end(), [&](const Buffer& b) { return b.data() == slot; }),
               "pool '{}': released {} is not one of its {} slots", name_, slot, buffers_.size());
  STRATA_CHECK(std::find(free_.begin(), free_.end(), slot) == free_.end(), "pool '{}': slot released twice", name_);
  if (after) {
    std::unique_ptr<Event>& e = released_[slot];
    if (!e) e = device_.create_event();  // once per slot, at the first step: nothing is allocated later
    after->record(*e);
  }
  free_.push_back(slot);
}

void PooledBuffer::own(Buffer b) {
  release();
  owned_ = std::move(b);
  data_ = owned_.data();
}

void PooledBuffer::borrow(BufferPool& pool, Stream* user) {
  release();
  pool_ = &pool;
  data_ = pool.acquire(user);
}

void PooledBuffer::release(Stream* after) {
  if (pool_) pool_->release(data_, after);
  owned_.reset();
  pool_ = nullptr;
  data_ = nullptr;
}

}  // namespace strata
