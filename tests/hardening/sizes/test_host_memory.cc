// Sizes are named (core/host_memory.h): an allocation the machine cannot hold fails at once naming its size, on the
// CPU device and in shared host memory (whose pages are reserved when it is made, not when first touched).
#include <gtest/gtest.h>

#include <string>

#include "core/cpu_device.h"
#include "core/host_memory.h"
#include "core/shared_host_memory.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

TEST(HostMemory, AnImpossibleAllocationNamesItsSize) {
  const std::uint64_t machine = machine_memory_bytes();
  ASSERT_GT(machine, 0u);
  CpuDevice dev(10.0);
  const std::size_t huge = static_cast<std::size_t>(4 * machine);
  try {
    Buffer b = dev.allocate(huge, MemCategory::kActivations);
    ADD_FAILURE() << "an allocation of 4x the machine's memory succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    const std::string m = e.what();
    EXPECT_NE(m.find("allocating activations on cpu: " + bytes_text(huge) + " is more than this machine's memory"),
              std::string::npos)
        << m;
  }
  EXPECT_EQ(dev.memory_stats().current_total(), 0u) << "nothing was counted";
  EXPECT_EQ(bytes_text(100ull << 30), "100.0 GiB (107374182400 bytes)");
}

TEST(HostMemory, SharedBlocksAreReservedWhenMade) {
  // A memfd of any size used to be made at once (ftruncate reserves nothing) and to fail with SIGBUS when touched.
  EXPECT_EQ(SharedHostMemory::allocate(static_cast<std::size_t>(2 * machine_memory_bytes())), nullptr);
  void* p = SharedHostMemory::allocate(std::size_t{4} << 20);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(SharedHostMemory::release(p));
}

}  // namespace
}  // namespace strata
