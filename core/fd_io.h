// Whole reads and writes on a file descriptor: the loops over short transfers and EINTR that every file writer and
// reader needs, with kIo errors naming `what` (a path, or a flag and its path) and the system's reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

// All `bytes` at the descriptor's position.
void write_all(int fd, const void* data, std::size_t bytes, const std::string& what);
// All `bytes` at `offset` (the position is unchanged: ranks write their parts of one file at once).
void pwrite_all(int fd, const void* data, std::size_t bytes, std::uint64_t offset, const std::string& what);
// Exactly `bytes` from `offset`; a file that ends before them is an error (it was truncated, or shrank after open).
void pread_all(int fd, void* out, std::size_t bytes, std::uint64_t offset, const std::string& what);

}  // namespace strata
