// Device's backend-independent parts: tagged allocation, the budget, the memory report, Buffer.
#include "core/device.h"

#include <fmt/format.h>

#include "core/error.h"

namespace strata {

const char* device_kind_name(DeviceKind k) { return k == DeviceKind::kCpu ? "cpu" : "cuda"; }

std::string Device::name() const {
  if (!label_.empty()) return label_;
  return kind() == DeviceKind::kCpu ? std::string("cpu") : fmt::format("cuda:{}", index_);
}

Buffer Device::allocate(std::size_t bytes, MemCategory category) {
  if (budget_ != 0 && stats_.current_total() + bytes > budget_) {
    STRATA_THROW(ErrorCode::kOutOfMemory,
                 "allocating {} bytes of {} on {} would exceed the device memory budget of {} bytes "
                 "(STRATA_DEVICE_MEMORY or the program's option); {} bytes in use:\n{}",
                 bytes, mem_category_name(category), name(), budget_, stats_.current_total(), memory_report());
  }
  void* ptr = bytes == 0 ? nullptr : raw_allocate(bytes, category);
  stats_.on_alloc(category, bytes);
  return Buffer(this, ptr, bytes, category);
}

void Device::release(void* ptr, std::size_t bytes, MemCategory category) {
  if (ptr) raw_free(ptr);
  stats_.on_free(category, bytes);
}

std::string Device::memory_report() const {
  std::string out = fmt::format("  {:<18} {:>14} {:>14}\n", "category", "current_bytes", "peak_bytes");
  for (std::size_t i = 0; i < kNumMemCategories; ++i) {
    auto c = static_cast<MemCategory>(i);
    out += fmt::format("  {:<18} {:>14} {:>14}\n", mem_category_name(c), stats_.current(c), stats_.peak(c));
  }
  out += fmt::format("  {:<18} {:>14} {:>14}\n", "total", stats_.current_total(), stats_.peak_total());
  return out;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    device_ = o.device_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    category_ = o.category_;
    o.device_ = nullptr;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::reset() {
  if (device_) device_->release(data_, bytes_, category_);
  device_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace strata
