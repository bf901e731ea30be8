// OutputFile: open, checked writes and close, errno's text in every error.
#include "core/output_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/fd_io.h"

namespace strata {

OutputFile::OutputFile(std::string path, std::string what, Mode mode)
    : path_(std::move(path)), what_(std::move(what)) {
  // O_NONBLOCK so a FIFO without a reader fails at once (ENXIO) instead of blocking the rank; then cleared, so writes
  // to a pipe wait for the reader as usual.
  const int keep = mode == Mode::kAppend ? O_APPEND : O_TRUNC;
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | keep | O_CLOEXEC | O_NONBLOCK, 0644);
  STRATA_CHECK_CODE(ErrorCode::kIo, fd_ >= 0, "cannot create {} '{}': {}", what_, path_,
                    errno == ENXIO ? "a FIFO with no reader" : std::strerror(errno));
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(std::exchange(fd_, -1));
    STRATA_THROW(ErrorCode::kIo, "cannot set up {} '{}' for writing: {}", what_, path_, std::strerror(err));
  }
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : path_(std::move(other.path_)), what_(std::move(other.what_)), fd_(std::exchange(other.fd_, -1)) {}

OutputFile& OutputFile::operator=(OutputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    what_ = std::move(other.what_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void OutputFile::write(std::string_view text) {
  STRATA_CHECK_CODE(ErrorCode::kIo, fd_ >= 0, "{} '{}' is not open for writing", what_, path_);
  write_all(fd_, text.data(), text.size(), fmt::format("{} '{}'", what_, path_));
}

void OutputFile::close() {
  if (fd_ < 0) return;
  const int rc = ::close(std::exchange(fd_, -1));
  STRATA_CHECK_CODE(ErrorCode::kIo, rc == 0, "cannot write {} '{}': {}", what_, path_, std::strerror(errno));
}

void write_output_file(const std::string& path, const std::string& what, std::string_view text) {
  OutputFile file(path, what);
  file.write(text);
  file.close();
}

}  // namespace strata
