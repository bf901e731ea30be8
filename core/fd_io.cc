// write_all, pwrite_all, pread_all: bounded per call (1 GiB, below what Linux moves in one write), retried on EINTR.
#include "core/fd_io.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace strata {

namespace {

constexpr std::size_t kMaxPerCall = std::size_t{1} << 30;

}  // namespace

void write_all(int fd, const void* data, std::size_t bytes, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, std::min(bytes, kMaxPerCall));
    if (n < 0 && errno == EINTR) continue;
    STRATA_CHECK_CODE(ErrorCode::kIo, n > 0, "cannot write {}: {}", what, std::strerror(n < 0 ? errno : EIO));
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void pwrite_all(int fd, const void* data, std::size_t bytes, std::uint64_t offset, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, std::min(bytes, kMaxPerCall), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    STRATA_CHECK_CODE(ErrorCode::kIo, n > 0, "cannot write {} at byte {}: {}", what, offset,
                      std::strerror(n < 0 ? errno : EIO));
    p += n;
    offset += static_cast<std::uint64_t>(n);
    bytes -= static_cast<std::size_t>(n);
  }
}

void pread_all(int fd, void* out, std::size_t bytes, std::uint64_t offset, const std::string& what) {
  char* p = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, std::min(bytes, kMaxPerCall), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    STRATA_CHECK_CODE(ErrorCode::kIo, n >= 0, "cannot read {} at byte {}: {}", what, offset, std::strerror(errno));
    STRATA_CHECK_CODE(ErrorCode::kIo, n > 0, "{} ends at byte {}, before the {} more bytes expected there (truncated?)",
                      what, offset, bytes);
    p += n;
    offset += static_cast<std::uint64_t>(n);
    bytes -= static_cast<std::size_t>(n);
  }
}

}  // namespace strata
