// UnitBuffers: one ShardedUnit's memory and the ordering of the streams' work on it: a buffer per UnitBuffer (the
// persistent ones owned and zeroed at construction, the transient ones borrowed from the model's pools while in use)
// and the events between the compute, gather, reduction and upload streams. UnitResources: what the units of one
// ShardedModel share to build them (ModelResources owns it).
#pragma once

#include <array>
#include <memory>

#include "core/device.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/unit_placement.h"

namespace strata {

class FlatOps;

// What one ShardedModel shares among its units: the pools of its pooled buffers, the element-wise operations, and
// under offload the host memory and the upload stream.
struct UnitResources {
  std::array<BufferPool*, kNumUnitBuffers> pools{};  // by UnitBuffer; null for a buffer no unit pools
  FlatOps* ops = nullptr;                            // element-wise work on the device's memory (its streams)
  FlatOps* host_ops = nullptr;                       // ... on host memory, ordered on any stream
  Device* host = nullptr;                            // offload: host memory, with its own ledger
  Stream* upload = nullptr;                          // offload: the device stream that copies host -> device
  BufferPool& pool(UnitBuffer b) const;
};

// The events of one unit, on its device.
struct UnitEvents {
  explicit UnitEvents(Device& device);
  std::unique_ptr<Event> unsharded;    // a gather's end
  std::unique_ptr<Event> grads_ready;  // the compute stream's gradients, before their reduction
  std::unique_ptr<Event> reduced;      // a reduction's end
  std::unique_ptr<Event> staged;       // offload params: the shard's copy to the device
  std::unique_ptr<Event> upload;       // offload: publish_params' copy to the device
  std::unique_ptr<Event> computed;     // the compute stream's work before a collective reads it
};

class UnitBuffers {
 public:
  // Allocates and zeroes (on each memory's compute stream, then synchronised) the persistent buffers of `placement`:
  // host memory from resources.host, the rest from `device`.
  UnitBuffers(const UnitPlacement& placement, const UnitResources& resources, Device& device);
  PooledBuffer& operator[](UnitBuffer b) { return buffers_[static_cast<std::size_t>(b)]; }
  UnitEvents events;

 private:
  std::array<PooledBuffer, kNumUnitBuffers> buffers_;  // by UnitBuffer: owned (persistent) or borrowed (pooled)
};

}  // namespace strata
