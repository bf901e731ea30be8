// fuzz_safetensors: libFuzzer entry point for SafetensorsReader: each input is a file, opened, every tensor read.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"

namespace {

constexpr std::uint64_t kMaxTensorBytes = 4 << 20;  // larger tensors are not read (the header is still validated)

// The input's bytes as a file the reader can open by path: one memfd per process, rewritten for each input, so
// nothing touches the disk and nothing is left behind.
const std::string& input_path(const std::uint8_t* data, std::size_t size) {
  static const int fd = memfd_create("fuzz_safetensors", MFD_CLOEXEC);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ::ftruncate(fd, 0) != 0) std::abort();
  for (std::size_t done = 0; done < size;) {
    const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) std::abort();
    done += static_cast<std::size_t>(n);
  }
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using strata::TensorInfo;
  const std::string& path = input_path(data, size);
  try {
    strata::SafetensorsReader reader(path);
    for (const std::string& name : reader.names()) {
      const TensorInfo& t = reader.info(name);
      if (t.end - t.begin > kMaxTensorBytes) continue;
      try {  // a tensor that read_f32 refuses (I32, I64) must not stop the others from being read
        const std::vector<float> all = reader.read_f32(name);
        const std::uint64_t half = t.numel() / 2;  // and a range read of its second half
        std::vector<float> tail(t.numel() - half);
        reader.read_f32(name, half, tail.size(), tail.data());
      } catch (const strata::Error&) {
      }
    }
    (void)reader.metadata().dump();
  } catch (const strata::Error&) {
    // A refused file: what the reader must do with a malformed one. Anything else escaping is a finding.
  }
  return 0;
}
