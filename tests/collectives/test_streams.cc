// Stream-model tests on the CPU backend: order, events across streams, failures, and real overlap of a
// collective on a communication stream with compute on the caller's thread.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "core/error.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::runtime;

TEST(Streams, CommunicationStreamOverlapsCallerCompute) {
  // A 32 MiB all-gather on a communication stream must finish while the caller is still computing: the caller
  // never waits on it, it only polls the event between slices of its own work.
  Device& dev = runtime().device();
  Communicator& world = runtime().world();
  auto comm_stream = dev.create_stream("comm");
  auto done = dev.create_event();
  std::size_t n = static_cast<std::size_t>(world.size());
  std::size_t count = (32u << 20) / 4 / n;
  Buffer send = dev.allocate(count * 4, MemCategory::kOther);
  Buffer recv = dev.allocate(n * count * 4, MemCategory::kOther);
  for (std::size_t i = 0; i < count; ++i) send.as<float>()[i] = static_cast<float>(world.rank());
  world.all_gather(send.data(), recv.data(), count, DType::kF32, *comm_stream);
  comm_stream->record(*done);

  // Caller-side compute, in slices, until the collective is seen complete (bounded by a slice budget).
  double acc = 0;
  int slices = 0;
  bool finished_during_compute = false;
  for (; slices < 200000; ++slices) {
    for (int i = 0; i < 20000; ++i) acc += std::sqrt(static_cast<double>(i + slices));
    if (done->query()) {
      finished_during_compute = true;
      break;
    }
  }
  EXPECT_TRUE(finished_during_compute) << "the all-gather did not progress while the caller computed";
  EXPECT_GT(acc, 0);
  comm_stream->synchronize();
  for (std::size_t r = 0; r < n; ++r) EXPECT_EQ(recv.as<float>()[r * count + count - 1], static_cast<float>(r));
}

TEST(Streams, ComputeStreamWaitsForCommunication) {
  // The FSDP pattern: gather on the comm stream, the compute stream waits on its event, then reads the result.
  Device& dev = runtime().device();
  Communicator& world = runtime().world();
  auto comm_stream = dev.create_stream("comm");
  auto gathered = dev.create_event();
  std::size_t n = static_cast<std::size_t>(world.size());
  Buffer send = dev.allocate(4, MemCategory::kOther);
  Buffer recv = dev.allocate(n * 4, MemCategory::kOther);
  *send.as<std::int32_t>() = world.rank() + 100;
  world.all_gather(send.data(), recv.data(), 1, DType::kI32, *comm_stream);
  comm_stream->record(*gathered);
  dev.compute_stream().wait(*gathered);  // CPU: the caller blocks here, bounded by the timeout
  for (std::size_t r = 0; r < n; ++r) EXPECT_EQ(recv.as<std::int32_t>()[r], static_cast<int>(r) + 100);
}

}  // namespace
}  // namespace strata
