// Helpers shared by the tests: the process's Runtime, rank-agreed checks, and exactly verifiable data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/device_registry.h"
#include "runtime/bootstrap/runtime.h"
#include "core/dtype.h"
#include "core/error.h"

#include <gtest/gtest.h>

// In a GPU test: skips unless this job runs on the CUDA backend (a visible GPU per local rank).
#define STRATA_SKIP_WITHOUT_CUDA_RUNTIME()                                                                  \
  if (::strata::cuda_device_count() == 0 || ::strata::test::runtime().backend() != ::strata::DeviceKind::kCuda) \
  GTEST_SKIP() << "needs the CUDA backend (a visible GPU per local rank; STRATA_BACKEND=auto or cuda)"

namespace strata::test {

void start_runtime(int* argc, char*** argv);
void stop_runtime();
Runtime& runtime();

// True on every rank when `ok` holds on every rank (a collective: call it on all ranks).
bool all_ranks(bool ok);

// An exactly representable value for (seed, rank, index): a small integer, so sums over ranks are exact in every
// float type (|v| <= 16, sums of up to 4 ranks stay integers below 2^8, exact in bf16).
inline int verifiable_int(int seed, int rank, std::size_t index) {
  std::uint64_t h = (static_cast<std::uint64_t>(seed) * 1000003u) ^ (static_cast<std::uint64_t>(rank) * 7919u) ^
                    (index * 2654435761u);
  h ^= h >> 13;
  return static_cast<int>(h % 17) - 8;
}

// Fills `count` elements of `dtype` at `dst` (host memory) with verifiable_int(seed, rank, i).
void fill_verifiable(void* dst, std::size_t count, DType dtype, int seed, int rank);
// Element i of a host buffer of `dtype`, as double.
double element(const void* src, std::size_t i, DType dtype);

// The code of the strata::Error `fn` throws; nullopt (and a test failure) when it throws none.
template <typename Fn>
std::optional<ErrorCode> error_code_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "expected a strata::Error";
  return std::nullopt;
}

// A directory every rank shares under the temporary directory (checkpoints): strata_<what>_<rank 0's pid>, made
// empty by rank 0 and removed at the end (collective: every rank constructs and destroys it).
class SharedScratchDir {
 public:
  explicit SharedScratchDir(const std::string& what);
  ~SharedScratchDir();
  SharedScratchDir(const SharedScratchDir&) = delete;
  SharedScratchDir& operator=(const SharedScratchDir&) = delete;
  std::string dir(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A directory of this rank's own under the temporary directory, emptied when made and removed at the end:
// strata_<what>_<pid>_<rank>.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& what);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace strata::test
