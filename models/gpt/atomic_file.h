// AtomicFile: writes a file through `path + ".tmp"` and a rename, so a failed write never leaves a partial file.
#pragma once

#include <cstddef>
#include <string>

namespace strata::gpt {

// Creates (truncating) `path + ".tmp"`; write() appends to it; commit() flushes it to disk and renames it over
// `path`. Destroyed without commit() (an exception on the way), it removes the .tmp and `path` is untouched.
// Two writers of the same path at once would share the .tmp: let one rank write.
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

}  // namespace strata::gpt
