// Host memory of this machine: its size, what is available now, and the check that a large allocation is one the
// machine can hold, so that an impossible size fails at once with the size named, not as std::bad_alloc or a SIGBUS
// when the memory is first touched.
#pragma once

#include <cstdint>
#include <string>

#include "core/byte_units.h"  // bytes_text, which its errors use

namespace strata {

// Physical memory of this machine (sysconf).
std::uint64_t machine_memory_bytes();
// MemAvailable of /proc/meminfo: what can be allocated without swapping; machine_memory_bytes() where unknown.
std::uint64_t available_memory_bytes();
// The largest resident set of this process since it started (VmHWM of /proc/self/status, bytes; 0 where unknown).
// Not getrusage's ru_maxrss: that one carries over the resident set of the process that forked this one (mpirun, a
// launcher daemon) at the moment it forked, which can be larger than this program ever is.
std::uint64_t peak_resident_bytes();
// This process's resident set now (VmRSS of /proc/self/status, bytes; 0 where unknown).
std::uint64_t resident_bytes();
// Whether `bytes`, on top of `in_use` bytes this process holds already, fit in the machine's physical memory (true
// where its size is unknown).
bool host_allocation_fits(std::uint64_t bytes, std::uint64_t in_use);
// kOutOfMemory naming `what`, the size and the machine's memory unless host_allocation_fits(bytes, in_use).
void check_host_allocation(std::uint64_t bytes, std::uint64_t in_use, const std::string& what);

}  // namespace strata
