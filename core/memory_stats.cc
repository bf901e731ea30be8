// MemoryStats counters and category names.
#include "core/memory_stats.h"

namespace strata {
namespace {
void raise_to(std::atomic<std::size_t>& peak, std::size_t value) {
  std::size_t seen = peak.load();
  while (value > seen && !peak.compare_exchange_weak(seen, value)) {
  }
}
}  // namespace

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::kParamShard: return "param_shard";
    case MemCategory::kMaster: return "master";
    case MemCategory::kGradShard: return "grad_shard";
    case MemCategory::kOptimState: return "optim_state";
    case MemCategory::kUnshardedParams: return "unsharded_params";
    case MemCategory::kUnshardedGrads: return "unsharded_grads";
    case MemCategory::kCommBuffer: return "comm_buffer";
    case MemCategory::kActivations: return "activations";
    case MemCategory::kWorkspace: return "workspace";
    case MemCategory::kCheckpoint: return "checkpoint";
    case MemCategory::kOther: return "other";
    case MemCategory::kCount: break;
  }
  return "?";
}

void MemoryStats::on_alloc(MemCategory c, std::size_t bytes) {
  allocations_.fetch_add(1);
  category_allocations_[idx(c)].fetch_add(1);
  raise_to(peak_[idx(c)], current_[idx(c)].fetch_add(bytes) + bytes);
  raise_to(total_peak_, total_current_.fetch_add(bytes) + bytes);
}

void MemoryStats::on_free(MemCategory c, std::size_t bytes) {
  current_[idx(c)].fetch_sub(bytes);
  total_current_.fetch_sub(bytes);
}

void MemoryStats::reset_peaks() {
  for (std::size_t i = 0; i < kNumMemCategories; ++i) peak_[i].store(current_[i].load());
  total_peak_.store(total_current_.load());
}

}  // namespace strata
