// AtomicFile: the writer's own temporary file, POSIX writes with errno in every error, fsync and rename.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/fd_io.h"
#include "core/file_checks.h"

namespace strata {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_path_(unique_tmp_path(path_)) {
  STRATA_CHECK(!path_.empty(), "empty output path");
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  STRATA_CHECK_CODE(ErrorCode::kIo, fd_ >= 0, "cannot create '{}': {}", tmp_path_, std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_path_.c_str());
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  STRATA_CHECK(fd_ >= 0 && !committed_, "write to '{}' after commit", path_);
  write_all(fd_, data, bytes, "'" + tmp_path_ + "'");
}

void AtomicFile::commit() {
  STRATA_CHECK(fd_ >= 0 && !committed_, "'{}' committed twice", path_);
  // The data must be on disk before the rename makes it visible under `path`.
  STRATA_CHECK_CODE(ErrorCode::kIo, ::fsync(fd_) == 0, "cannot flush '{}': {}", tmp_path_, std::strerror(errno));
  int rc = ::close(fd_);
  fd_ = -1;
  STRATA_CHECK_CODE(ErrorCode::kIo, rc == 0, "cannot close '{}': {}", tmp_path_, std::strerror(errno));
  STRATA_CHECK_CODE(ErrorCode::kIo, std::rename(tmp_path_.c_str(), path_.c_str()) == 0,
                    "cannot rename '{}' to '{}': {}", tmp_path_, path_, std::strerror(errno));
  committed_ = true;
}

}  // namespace strata
