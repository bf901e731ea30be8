// OutputFile: a file written in place (metrics, a trace, a JSON report; /dev/null works) where every write is checked,
// so a full disk or a failed write is an error naming the file and the system's reason, never a file cut short.
#pragma once

#include <string>
#include <string_view>

namespace strata {

class OutputFile {
 public:
  enum class Mode { kTruncate, kAppend };
  OutputFile() = default;
  // Creates `path`, or truncates it (kTruncate) or writes after what it holds (kAppend: a resumed run's --metrics);
  // kIo naming `what` (a flag: "--metrics"), the path and the system error. Never blocks in the open: a FIFO with no
  // reader is an error.
  OutputFile(std::string path, std::string what, Mode mode = Mode::kTruncate);
  ~OutputFile();  // closes without reporting: call close() to know
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  bool is_open() const { return fd_ >= 0; }
  // Writes all of `text` with write(2): no buffer in between, so a failure shows at the record that met it. kIo.
  void write(std::string_view text);
  // Closes, reporting an error the system deferred to the close. kIo.
  void close();
  const std::string& path() const { return path_; }

 private:
  std::string path_, what_;
  int fd_ = -1;
};

// `text` written to `path` in place: OutputFile, write, close.
void write_output_file(const std::string& path, const std::string& what, std::string_view text);

}  // namespace strata
