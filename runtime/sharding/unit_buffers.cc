// UnitBuffers: the persistent buffers of a unit's placement, zeroed; its events; the pools' lookup by buffer.
#include "runtime/sharding/unit_buffers.h"

#include "core/error.h"

namespace strata {

BufferPool& UnitResources::pool(UnitBuffer b) const {
  BufferPool* p = pools[static_cast<std::size_t>(b)];
  STRATA_CHECK_CODE(ErrorCode::kInternal, p != nullptr, "no pool for the {} buffer", unit_buffer_name(b));
  return *p;
}

UnitEvents::UnitEvents(Device& device)
    : unsharded(device.create_event()),
      grads_ready(device.create_event()),
      reduced(device.create_event()),
      staged(device.create_event()),
      upload(device.create_event()),
      computed(device.create_event()) {}

UnitBuffers::UnitBuffers(const UnitPlacement& placement, const UnitResources& resources, Device& device)
    : events(device) {
  for (const BufferPlan& b : placement.buffers()) {
    if (b.lifetime != Lifetime::kPersistent) continue;
    Device& where = b.memory == Memory::kHost ? *resources.host : device;
    Buffer owned = where.allocate(b.bytes(), b.category);
    where.fill_zero(owned.data(), b.bytes(), where.compute_stream());
    (*this)[b.buffer].own(std::move(owned));
  }
  device.compute_stream().synchronize();  // the zero fills, before init's copies (which no stream orders)
  if (resources.host) resources.host->compute_stream().synchronize();
}

}  // namespace strata
