// AtomicFile: writes a file through a temporary beside it and a rename, so a failed write never leaves a partial file.
#pragma once

#include <cstddef>
#include <string>

namespace strata {

// Creates a temporary beside `path` that is this writer's alone (unique_tmp_path: `path.tmp.host.pid.n`); write()
// appends to it; commit() flushes it to disk and renames it over `path`, the only step that makes it visible.
// Destroyed without commit() (an exception on the way), it removes the temporary and `path` is untouched. Two writers
// of one path at once each write their own temporary, and `path` ends as one of their files, whole.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // throws kIo naming the file and the system error
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t bytes);  // throws kIo
  void commit();                                    // throws kIo; then the object is spent

  const std::string& path() const { return path_; }
  const std::string& tmp_path() const { return tmp_path_; }

 private:
  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace strata
