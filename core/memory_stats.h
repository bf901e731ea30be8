// MemCategory and MemoryStats: current and peak bytes per category, per device, per rank.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

// What an allocation is for. Every allocation through a Device carries one.
enum class MemCategory : std::uint8_t {
  kParamShard,       // sharded parameters in the compute/storage dtype
  kMaster,           // f32 master shard
  kGradShard,        // sharded gradients (f32)
  kOptimState,       // Adam m and v
  kUnshardedParams,  // gathered parameters of a unit
  kUnshardedGrads,   // full gradients of a unit before reduce-scatter
  kCommBuffer,       // staging buffers of the communicator
  kActivations,      // reported by the trainer
  kWorkspace,        // kernel scratch
  kCheckpoint,       // checkpoint staging (host memory)
  kOther,
  kCount
};

constexpr std::size_t kNumMemCategories = static_cast<std::size_t>(MemCategory::kCount);

const char* mem_category_name(MemCategory c);  // "param_shard", "master", ...

// Lock-free counters; one per device.
class MemoryStats {
 public:
  void on_alloc(MemCategory c, std::size_t bytes);
  void on_free(MemCategory c, std::size_t bytes);
  std::size_t current(MemCategory c) const { return current_[idx(c)].load(); }
  std::size_t peak(MemCategory c) const { return peak_[idx(c)].load(); }
  std::size_t current_total() const { return total_current_.load(); }
  std::size_t peak_total() const { return total_peak_.load(); }
  // Allocations made so far (a step that allocates nothing leaves it unchanged), in all or in one category.
  std::size_t allocations() const { return allocations_.load(); }
  std::size_t allocations(MemCategory c) const { return category_allocations_[idx(c)].load(); }
  // Starts a new peak window: peaks become the current values.
  void reset_peaks();

 private:
  static std::size_t idx(MemCategory c) { return static_cast<std::size_t>(c); }
  std::array<std::atomic<std::size_t>, kNumMemCategories> current_{};
  std::array<std::atomic<std::size_t>, kNumMemCategories> peak_{};
  std::atomic<std::size_t> total_current_{0};
  std::atomic<std::size_t> total_peak_{0};
  std::atomic<std::size_t> allocations_{0};
  std::array<std::atomic<std::size_t>, kNumMemCategories> category_allocations_{};
};

}  // namespace strata
