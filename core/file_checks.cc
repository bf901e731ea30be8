// File checks: file types, non-blocking input opens, output path checks, writer-unique temporary names.
#include "core/file_checks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "core/fd_io.h"

namespace strata {
namespace {

std::string directory_of(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

}  // namespace

const char* file_type_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "regular file";
    case S_IFDIR: return "directory";
    case S_IFIFO: return "FIFO";
    case S_IFSOCK: return "socket";
    case S_IFCHR: return "character device";
    case S_IFBLK: return "block device";
    case S_IFLNK: return "symbolic link";
  }
  return "unknown file type";
}

int try_open_input_file(const std::string& path, const std::string& what, std::string& problem) {
  const std::string named = what.empty() ? path : what + " " + path;
  if (path.empty()) {
    problem = what + ": empty path";
    return -1;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    problem = "cannot open " + named + ": " + std::strerror(errno);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    problem = "cannot stat " + named + ": " + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    problem = (what.empty() ? "" : what + " ") + "'" + path + "' is not a regular file but a " +
              file_type_name(st.st_mode) + " (a FIFO or a device would block or change under the reader)";
  } else {
    // A regular file never blocks; reads go back to their plain semantics.
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0 && ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0) return fd;
    problem = "cannot set up " + named + " for reading: " + std::strerror(errno);
  }
  ::close(fd);
  return -1;
}

int open_input_file(const std::string& path, const std::string& what) {
  std::string problem;
  const int fd = try_open_input_file(path, what, problem);
  STRATA_CHECK_CODE(ErrorCode::kIo, fd >= 0, "{}", problem);
  return fd;
}

void check_input_file(const std::string& path, const std::string& what) { ::close(open_input_file(path, what)); }

std::string read_input_file(const std::string& path, const std::string& what, std::size_t max_bytes) {
  const int fd = open_input_file(path, what);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  STRATA_CHECK_CODE(ErrorCode::kIo, ::fstat(fd, &st) == 0, "cannot stat {} '{}': {}", what, path,
                    std::strerror(errno));
  STRATA_CHECK_CODE(ErrorCode::kIo, static_cast<std::uint64_t>(st.st_size) <= max_bytes,
                    "{} '{}' has {} bytes, more than the {} such a file may have", what, path,
                    static_cast<std::uint64_t>(st.st_size), max_bytes);
  std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
  pread_all(fd, bytes.data(), bytes.size(), 0, fmt::format("{} '{}'", what, path));
  return bytes;
}

void check_output_file(const std::string& path, const std::string& what, OutputKind kind) {
  STRATA_CHECK_CODE(ErrorCode::kIo, !path.empty(), "{}: empty path", what);
  const std::string dir = directory_of(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    STRATA_THROW(ErrorCode::kIo, "{} '{}': the directory '{}' {}", what, path, dir,
                 err == ENOENT ? std::string("does not exist") : "cannot be read: " + std::string(std::strerror(err)));
  }
  STRATA_CHECK_CODE(ErrorCode::kIo, S_ISDIR(st.st_mode), "{} '{}': '{}' is a {}, not a directory", what, path, dir,
                    file_type_name(st.st_mode));
  STRATA_CHECK_CODE(ErrorCode::kIo, ::access(dir.c_str(), W_OK | X_OK) == 0, "{} '{}': the directory '{}' is not "
                    "writable: {}", what, path, dir, std::strerror(errno));
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    STRATA_CHECK_CODE(ErrorCode::kIo, err == ENOENT, "{} '{}': cannot stat it: {}", what, path, std::strerror(err));
    return;  // created by the writer
  }
  const char* type = file_type_name(st.st_mode);
  STRATA_CHECK_CODE(ErrorCode::kIo, !S_ISDIR(st.st_mode), "{} '{}' is a directory: give a file name", what, path);
  if (kind == OutputKind::kReplaced) {
    STRATA_CHECK_CODE(ErrorCode::kIo, S_ISREG(st.st_mode),
                      "{} '{}' is a {}: the file is written beside it and renamed over it, so it must be a regular "
                      "file or not exist", what, path, type);
  } else if (S_ISFIFO(st.st_mode)) {
    // Opening a FIFO for writing blocks until a reader comes; with O_NONBLOCK it fails at once instead (ENXIO).
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    const int err = errno;
    if (fd >= 0) ::close(fd);
    STRATA_CHECK_CODE(ErrorCode::kIo, fd >= 0, "{} '{}' is a FIFO {}", what, path,
                      err == ENXIO ? std::string("with no reader: writing it would block")
                                   : "that cannot be opened: " + std::string(std::strerror(err)));
  } else {
    STRATA_CHECK_CODE(ErrorCode::kIo, S_ISREG(st.st_mode) || S_ISCHR(st.st_mode),
                      "{} '{}' is a {}: give a regular file", what, path, type);
  }
  STRATA_CHECK_CODE(ErrorCode::kIo, ::access(path.c_str(), W_OK) == 0, "{} '{}' ({}) is not writable: {}", what, path,
                    type, std::strerror(errno));
}

void prepare_output_dir(const std::string& path, const std::string& what) {
  STRATA_CHECK_CODE(ErrorCode::kIo, !path.empty(), "{}: empty path", what);
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  STRATA_CHECK_CODE(ErrorCode::kIo, !ec, "{} '{}': cannot create the directory: {}", what, path, ec.message());
  struct stat st {};
  STRATA_CHECK_CODE(ErrorCode::kIo, ::stat(path.c_str(), &st) == 0, "{} '{}': cannot stat it: {}", what, path,
                    std::strerror(errno));
  STRATA_CHECK_CODE(ErrorCode::kIo, S_ISDIR(st.st_mode), "{} '{}' is a {}, not a directory", what, path,
                    file_type_name(st.st_mode));
  STRATA_CHECK_CODE(ErrorCode::kIo, ::access(path.c_str(), W_OK | X_OK) == 0, "{} '{}': the directory is not "
                    "writable: {}", what, path, std::strerror(errno));
}

std::string process_tag() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "host");
  return std::string(host) + "." + std::to_string(::getpid());
}

std::string tmp_path_for(const std::string& path, const std::string& writer) { return path + ".tmp." + writer; }

std::string unique_tmp_path(const std::string& path) {
  static std::atomic<unsigned long> calls{0};
  return tmp_path_for(path, process_tag() + "." + std::to_string(calls.fetch_add(1)));
}

}  // namespace strata
