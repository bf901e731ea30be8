// SharedHostMemory: host allocations that the other processes of this machine can map, so the CPU backend's
// collectives read a peer's buffer where it lies instead of copying it through a segment first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/memory_stats.h"

namespace strata {

// Where a shared allocation lies: the memfd that holds it, open in process `pid` as descriptor `fd`; `id` names the
// allocation uniquely within that process (a descriptor number is reused once its block is freed, an id never is).
struct SharedBlockRef {
  std::int32_t pid = 0;
  std::int32_t fd = -1;
  std::uint64_t id = 0;
  std::uint64_t block_bytes = 0;  // the whole block, as a peer maps it
  std::uint64_t offset = 0;       // of the buffer asked about, within the block
};

// Process-wide and thread-safe. The CPU device allocates the buffers that collectives read (parameters, gradients,
// communication buffers; see wants()) of at least kMinBytes here: a memfd of its own, mapped MAP_SHARED. A peer
// opens it through /proc/<pid>/fd/<fd> (collectives/peer_blocks.h), which needs no name in /dev/shm and leaves
// nothing behind when the processes end. When memfd_create or mmap fails (no descriptors left, say) allocate()
// returns nullptr and the device falls back to ordinary memory, which the collectives copy through their segment.
class SharedHostMemory {
 public:
  static constexpr std::size_t kMinBytes = 1u << 20;

  // Whether an allocation of `bytes` in `category` should be shared: big enough, a category that collectives read,
  // and neither STRATA_SHM nor STRATA_SHM_IN_PLACE 0.
  static bool wants(std::size_t bytes, MemCategory category);
  // A page-aligned shared block of `bytes` (rounded up to pages), or nullptr.
  static void* allocate(std::size_t bytes);
  // Frees `ptr` if allocate() gave it and returns true; false (nothing done) for any other pointer.
  static bool release(void* ptr);
  // The block holding [ptr, ptr + bytes) whole, if allocate() gave one.
  static std::optional<SharedBlockRef> find(const void* ptr, std::size_t bytes);
  // Blocks live now (for tests).
  static std::size_t live_blocks();
};

}  // namespace strata
