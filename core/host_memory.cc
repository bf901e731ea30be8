// Host memory: sysconf, /proc/meminfo and /proc/self/status, and the allocation check.
#include "core/host_memory.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace strata {

std::uint64_t machine_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

namespace {

// The kB value of the line `key` ("MemAvailable:", "VmHWM:") of a /proc file, in bytes; 0 where it is not there.
std::uint64_t proc_kib_field(const char* path, const char* key) {
  std::FILE* f = std::fopen(path, "re");
  unsigned long long kib = 0;
  if (f) {
    char line[256];
    const std::size_t n = std::strlen(key);
    while (std::fgets(line, sizeof(line), f))
      if (std::strncmp(line, key, n) == 0 && std::sscanf(line + n, " %llu kB", &kib) == 1) break;
    std::fclose(f);
  }
  return static_cast<std::uint64_t>(kib) * 1024;
}

}  // namespace

std::uint64_t available_memory_bytes() {
  const std::uint64_t bytes = proc_kib_field("/proc/meminfo", "MemAvailable:");
  return bytes > 0 ? bytes : machine_memory_bytes();
}

std::uint64_t peak_resident_bytes() { return proc_kib_field("/proc/self/status", "VmHWM:"); }

std::uint64_t resident_bytes() { return proc_kib_field("/proc/self/status", "VmRSS:"); }

bool host_allocation_fits(std::uint64_t bytes, std::uint64_t in_use) {
  const std::uint64_t machine = machine_memory_bytes();
  return machine == 0 || (bytes <= machine && in_use <= machine - bytes);  // unknown: nothing to compare with
}

void check_host_allocation(std::uint64_t bytes, std::uint64_t in_use, const std::string& what) {
  STRATA_CHECK_CODE(ErrorCode::kOutOfMemory, host_allocation_fits(bytes, in_use),
                    "{}: {} {}is more than this machine's memory, {} ({} available now)", what, bytes_text(bytes),
                    in_use > 0 ? fmt::format("on top of the {} this process holds ", bytes_text(in_use)) : "",
                    bytes_text(machine_memory_bytes()), bytes_text(available_memory_bytes()));
}

}  // namespace strata
