// SharedHostMemory: memfd-backed host blocks and the registry that finds the block of a pointer.
#include "core/shared_host_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "core/env.h"
#include "core/host_memory.h"
#include "core/logging.h"

namespace strata {
namespace {

struct Block {
  std::size_t bytes;
  int fd;
  std::uint64_t id;
};

struct Registry {
  std::mutex mutex;
  std::map<std::uintptr_t, Block> blocks;  // by start address
  std::uint64_t next_id = 1;
  bool warned = false;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: buffers may be freed during static destruction
  return *r;
}

}  // namespace

bool SharedHostMemory::wants(std::size_t bytes, MemCategory category) {
  if (bytes < kMinBytes || !env().shm || !env().shm_in_place) return false;
  switch (category) {
    case MemCategory::kParamShard:
    case MemCategory::kGradShard:
    case MemCategory::kUnshardedParams:
    case MemCategory::kUnshardedGrads:
    case MemCategory::kCommBuffer:
    case MemCategory::kOther:
      return true;
    default:  // master weights, optimizer state, activations, workspace, checkpoints: no collective reads them
      return false;
  }
}

void* SharedHostMemory::allocate(std::size_t bytes) {
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t rounded = (bytes + page - 1) / page * page;
  Registry& reg = registry();
  auto give_up = [&](const char* call) -> void* {
    const int err = errno;
    std::lock_guard<std::mutex> lock(reg.mutex);
    if (!reg.warned)
      logger("mem").debug("shared host memory: {} failed for {} bytes ({}); using private memory", call, bytes,
                          std::strerror(err));
    reg.warned = true;
    return nullptr;
  };
  int fd = ::memfd_create("strata-host", MFD_CLOEXEC);
  if (fd < 0) return give_up("memfd_create");
  if (::ftruncate(fd, static_cast<off_t>(rounded)) != 0) {
    ::close(fd);
    return give_up("ftruncate");
  }
  // A memfd's pages come when first touched: reserved now, so a size the machine cannot hold fails here (and the
  // device falls back to private memory, whose allocation names the size) instead of as a SIGBUS in a collective.
  if (rounded > available_memory_bytes() || ::posix_fallocate(fd, 0, static_cast<off_t>(rounded)) != 0) {
    ::close(fd);
    errno = ENOMEM;
    return give_up("reserving the pages");
  }
  void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    ::close(fd);
    return give_up("mmap");
  }
  std::lock_guard<std::mutex> lock(reg.mutex);
  reg.blocks.emplace(reinterpret_cast<std::uintptr_t>(p), Block{rounded, fd, reg.next_id++});
  return p;
}

bool SharedHostMemory::release(void* ptr) {
  Registry& reg = registry();
  Block b{};
  {
    std::lock_guard<std::mutex> lock(reg.mutex);
    auto it = reg.blocks.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == reg.blocks.end()) return false;
    b = it->second;
    reg.blocks.erase(it);
  }
  ::munmap(ptr, b.bytes);
  ::close(b.fd);
  return true;
}

std::optional<SharedBlockRef> SharedHostMemory::find(const void* ptr, std::size_t bytes) {
  const auto at = reinterpret_cast<std::uintptr_t>(ptr);
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  auto it = reg.blocks.upper_bound(at);
  if (it == reg.blocks.begin()) return std::nullopt;
  --it;
  const Block& b = it->second;
  const std::uintptr_t off = at - it->first;
  if (off > b.bytes || bytes > b.bytes - off) return std::nullopt;
  return SharedBlockRef{static_cast<std::int32_t>(::getpid()), b.fd, b.id, b.bytes, off};
}

std::size_t SharedHostMemory::live_blocks() {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  return reg.blocks.size();
}

}  // namespace strata
