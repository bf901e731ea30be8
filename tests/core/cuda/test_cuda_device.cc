// Tests of CudaDevice: the allocation ledger, copies, stream and event ordering, host tasks and bounded waits.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/device_registry.h"
#include "core/error.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using test::error_code_of;

constexpr double kTimeoutS = 60.0;

#define STRATA_SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible"

std::unique_ptr<Device> make_gpu() {
  return create_device(DeviceKind::kCuda, test::runtime().local_rank() % cuda_device_count(), kTimeoutS);
}

std::vector<std::uint8_t> pattern(std::size_t bytes, unsigned salt) {
  std::vector<std::uint8_t> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::uint8_t>((i * 131 + salt * 17 + (i >> 12)) & 0xff);
  return v;
}

std::size_t count_differences(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

TEST(CudaDevice, KindNameAndStreamIds) {
  STRATA_SKIP_WITHOUT_GPU();
  auto dev = make_gpu();
  EXPECT_EQ(dev->kind(), DeviceKind::kCuda);
  EXPECT_EQ(dev->name(), "cuda:" + std::to_string(dev->index()));
  EXPECT_NE(dev->compute_stream().native_handle(), nullptr);
  EXPECT_EQ(dev->compute_stream().id(), 0u);
  EXPECT_EQ(&dev->compute_stream().device(), dev.get());
  auto a = dev->create_stream("a");
  auto b = dev->create_stream("b");
  EXPECT_EQ(a->id(), 1u);
  EXPECT_EQ(b->id(), 2u);
  EXPECT_EQ(a->name(), "a");
  EXPECT_NE(a->native_handle(), b->native_handle());
}

TEST(CudaDevice, LedgerTracksCurrentAndPeakPerCategory) {
  STRATA_SKIP_WITHOUT_GPU();
  auto dev = make_gpu();
  MemoryStats& stats = dev->memory_stats();
  {
    Buffer a = dev->allocate(1000, MemCategory::kParamShard);
    Buffer b = dev->allocate(4096, MemCategory::kOptimState);
    Buffer empty = dev->allocate(0, MemCategory::kWorkspace);
    EXPECT_NE(a.data(), nullptr);
    EXPECT_EQ(a.category(), MemCategory::kParamShard);
    EXPECT_EQ(a.device(), dev.get());
    EXPECT_TRUE(static_cast<bool>(empty));
    EXPECT_EQ(empty.data(), nullptr);
    EXPECT_EQ(stats.current(MemCategory::kParamShard), 1000u);
    EXPECT_EQ(stats.current(MemCategory::kOptimState), 4096u);
    EXPECT_EQ(stats.current(MemCategory::kWorkspace), 0u);
    EXPECT_EQ(stats.current_total(), 5096u);
    {
      Buffer c = dev->allocate(2000, MemCategory::kParamShard);
      EXPECT_EQ(stats.current(MemCategory::kParamShard), 3000u);
    }
    EXPECT_EQ(stats.current(MemCategory::kParamShard), 1000u);
    EXPECT_EQ(stats.peak(MemCategory::kParamShard), 3000u);
    Buffer moved = std::move(b);
    EXPECT_EQ(stats.current(MemCategory::kOptimState), 4096u);
  }
  EXPECT_EQ(stats.current_total(), 0u);
  EXPECT_EQ(stats.peak_total(), 7096u);
  EXPECT_EQ(stats.peak(MemCategory::kOptimState), 4096u);
}

// The driver's count of device memory in use holds the ledger's allocations: 256 MiB allocated raise it by at least
// that much (other processes on the GPU may move it too, so only the lower bound is exact), and it is above the
// ledger's total by the CUDA context at least.
TEST(CudaDevice, DriverCountHoldsTheLedgersAllocations) {
  STRATA_SKIP_WITHOUT_GPU();
  auto dev = make_gpu();
  dev->compute_stream().synchronize();  // the context exists
  const std::size_t before = dev->driver_bytes_in_use();
  ASSERT_GT(before, 0u);
  Buffer b = dev->allocate(std::size_t{256} << 20, MemCategory::kActivations);
  const std::size_t after = dev->driver_bytes_in_use();
  EXPECT_GE(after, before + (std::size_t{256} << 20));
  EXPECT_GT(after, dev->memory_stats().current_total());
}

TEST(CudaDevice, OutOfMemoryIsReportedWithoutChangingTheLedger) {
  STRATA_SKIP_WITHOUT_GPU();
  auto dev = make_gpu();
  dev->set_memory_budget(1 << 20);
  Buffer fits = dev->allocate(1 << 20, MemCategory::kOther);
  EXPECT_EQ(error_code_of([&] { (void)dev->allocate(1, MemCategory::kOther); }), ErrorCode::kOutOfMemory);
  fits.reset();
  dev->set_memory_budget(0);
  // Far beyond any GPU: cudaMalloc itself fails.
  EXPECT_EQ(error_code_of([&] { (void)dev->allocate(std::size_t{1} << 52, MemCategory::kOther); }),
            ErrorCode::kOutOfMemory);
  EXPECT_EQ(dev->memory_stats().current_total(), 0u);
  // The device stays usable.
  Buffer after = dev->allocate(4096, MemCategory::kOther);
  EXPECT_NE(after.data(), nullptr);
}

TEST(CudaDevice, HostDeviceHostRoundTrips) {
  STRATA_SKIP_WITHOUT_GPU();
  auto dev = make_gpu();
  auto stream = dev->create_stream("copies");
  for (std::size_t bytes : {std::size_t{1}, std::size_t{1009}, (std::size_t{4} << 20) + 3}) {
    SCOPED_TRACE("bytes=" + std::to_string(bytes));
    std::vector<std::uint8_t> in = pattern(bytes, 1);
    Buffer a = dev->allocate(bytes, MemCategory::kOther);
    Buffer b = dev->allocate(bytes, MemCategory::kOther);
    dev->copy_from_host(a.data(), in.data(), bytes);
    dev->copy(b.data(), a.data(), bytes, *stream);  // device to device
    stream->synchronize();
    std::vector<std::uint8_t> out(bytes);
    dev->copy_to_host(out.data(), b.data(), bytes);
    EXPECT_EQ(count_differences(in, out), 0u);
    // Stream-ordered copies to and from host memory (cudaMemcpyDefault).
    std::vector<std::uint8_t> in2 = pattern(bytes, 2);
    std::vector<std::uint8_t> out2(bytes);
    dev->copy(a.data(), in2.data(), bytes, *stream);
    dev->copy(out2.data(), a.data(), bytes, *stream);
    stream->synchronize();
    EXPECT_EQ(count_differences(in2, out2), 0u);
  }
  // Zero bytes is a no-op everywhere.
  dev->copy(nullptr, nullptr, 0, dev->compute_stream());
  dev->fill_zero(nullptr, 0, dev->compute_stream());
  dev->copy_to_host(nullptr, nullptr, 0);
  dev->copy_from_host(nullptr, nullptr, 0);
  dev->compute_stream().synchronize();
}

TEST(CudaDevice, FillZeroClearsOnlyItsRange) {
  STRATA_SKIP_WITHOUT_GPU();
  auto dev = make_gpu();
  const std::size_t bytes = 4096;
  std::vector<std::uint8_t> in = pattern(bytes, 3);
  for (auto& v : in) v |= 1;  // no zero bytes in the pattern
  Buffer buf = dev->allocate(bytes, MemCategory::kOther);
  dev->copy_from_host(buf.data(), in.data(), bytes);
  dev->fill_zero(buf.as<std::uint8_t>() + 100, 500, dev->compute_stream());
  dev->compute_stream().synchronize();
  std::vector<std::uint8_t> out(bytes);
  dev->copy_to_host(out.data(), buf.data(), bytes);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < bytes; ++i) wrong += out[i] != (i >= 100 && i < 600 ? 0 : in[i]);
  EXPECT_EQ(wrong, 0u);
}

TEST(CudaDevice, EventOrdersWorkAcrossStreams) {
  STRATA_SKIP_WITHOUT_GPU();
  auto dev = make_gpu();
  const std::size_t bytes = std::size_t{64} << 20;
  std::vector<std::uint8_t> in = pattern(bytes, 4);
  Buffer src = dev->allocate(bytes, MemCategory::kOther);
  Buffer x = dev->allocate(bytes, MemCategory::kOther);
  Buffer y = dev->allocate(bytes, MemCategory::kOther);
  Buffer z = dev->allocate(bytes, MemCategory::kOther);
  dev->copy_from_host(src.data(), in.data(), bytes);
  dev->fill_zero(x.data(), bytes, dev->compute_stream());
  dev->fill_zero(z.data(), bytes, dev->compute_stream());
  dev->compute_stream().synchronize();

  auto a = dev->create_stream("a");
  auto b = dev->create_stream("b");
  auto done = dev->create_event();
  // A long chain on A ends with x == src; B copies x only after the event.
  dev->copy(y.data(), src.data(), bytes, *a);
  for (int i = 0; i < 10; ++i) {
    dev->copy(x.data(), y.data(), bytes, *a);
    dev->copy(y.data(), x.data(), bytes, *a);
  }
  a->record(*done);
  b->wait(*done);
  dev->copy(z.data(), x.data(), bytes, *b);
  b->synchronize();
  EXPECT_TRUE(done->query());
  done->synchronize();
  std::vector<std::uint8_t> out(bytes);
  dev->copy_to_host(out.data(), z.data(), bytes);
  EXPECT_EQ(count_differences(in, out), 0u);
  a->synchronize();

  // An event never recorded is complete, and waiting on it is a no-op.
  auto fresh = dev->create_event();
  EXPECT_TRUE(fresh->query());
  fresh->synchronize();
  b->wait(*fresh);
  b->synchronize();
}

TEST(CudaDevice, HostTasksRunInStreamOrder) {
  STRATA_SKIP_WITHOUT_GPU();
  auto dev = make_gpu();
  auto stream = dev->create_stream("host");
  const std::size_t bytes = std::size_t{8} << 20;
  std::vector<std::uint8_t> in = pattern(bytes, 5);
  Buffer buf = dev->allocate(bytes, MemCategory::kOther);
  dev->copy_from_host(buf.data(), in.data(), bytes);

  std::vector<std::uint8_t> seen(bytes, 0);
  std::vector<int> order;
  bool copy_was_complete = false;
  bool zeros_were_seen = false;
  dev->copy(seen.data(), buf.data(), bytes, *stream);
  stream->enqueue_host([&] {
    copy_was_complete = seen == in;
    order.push_back(0);
  });
  dev->fill_zero(buf.data(), bytes, *stream);
  dev->copy(seen.data(), buf.data(), bytes, *stream);
  stream->enqueue_host([&] {
    zeros_were_seen = std::all_of(seen.begin(), seen.end(), [](std::uint8_t v) { return v == 0; });
    order.push_back(1);
  });
  for (int i = 2; i < 50; ++i) stream->enqueue_host([&order, i] { order.push_back(i); });
  stream->synchronize();
  EXPECT_TRUE(copy_was_complete);
  EXPECT_TRUE(zeros_were_seen);
  std::vector<int> expected(50);
  for (int i = 0; i < 50; ++i) expected[static_cast<std::size_t>(i)] = i;
  EXPECT_EQ(order, expected);
}

TEST(CudaDevice, HostTaskFailureIsRethrownBySynchronizeAndCleared) {
  STRATA_SKIP_WITHOUT_GPU();
  auto dev = make_gpu();
  auto stream = dev->create_stream("failing");
  bool later_ran = false;
  stream->enqueue_host([] { throw std::runtime_error("boom"); });
  stream->enqueue_host([&] { later_ran = true; });
  EXPECT_THROW(stream->synchronize(), std::runtime_error);
  EXPECT_FALSE(later_ran);  // skipped after the failure, as on CpuStream
  bool ran = false;
  stream->enqueue_host([&] { ran = true; });
  EXPECT_NO_THROW(stream->synchronize());
  EXPECT_TRUE(ran);
}

TEST(CudaDevice, EventCarriesAHostTaskFailureToItsWaiters) {
  STRATA_SKIP_WITHOUT_GPU();
  auto dev = make_gpu();
  auto a = dev->create_stream("a");
  auto b = dev->create_stream("b");
  auto event = dev->create_event();
  bool b_ran = false;
  a->enqueue_host([] { throw std::runtime_error("boom in a"); });
  a->record(*event);
  b->wait(*event);
  b->enqueue_host([&] { b_ran = true; });
  EXPECT_EQ(error_code_of([&] { event->synchronize(); }), ErrorCode::kInternal);  // a non-Strata exception
  EXPECT_EQ(error_code_of([&] { b->synchronize(); }), ErrorCode::kInternal);
  EXPECT_FALSE(b_ran);
  EXPECT_THROW(a->synchronize(), std::runtime_error);
  // Recorded again after the failure was cleared, the event is clean.
  a->record(*event);
  EXPECT_NO_THROW(event->synchronize());
  EXPECT_TRUE(event->query());
}

// Both waits give up while the task still runs (the event is not yet complete after them). The first timeout also
// aborts the process's NCCL communicators, whose ncclCommAbort waits for the device (for this task, on an H200): the
// timeout path waits at most 3 s for it, so the task outlasts both waits and that by far.
TEST(CudaDevice, WaitsAreBoundedByTheTimeout) {
  STRATA_SKIP_WITHOUT_GPU();
  auto dev = make_gpu();
  dev->set_timeout_s(0.3);
  auto stream = dev->create_stream("slow");
  auto event = dev->create_event();
  stream->enqueue_host([] { std::this_thread::sleep_for(std::chrono::seconds(10)); });
  stream->record(*event);
  EXPECT_EQ(error_code_of([&] { stream->synchronize(); }), ErrorCode::kTimeout);
  EXPECT_EQ(error_code_of([&] { event->synchronize(); }), ErrorCode::kTimeout);
  EXPECT_FALSE(event->query());
  dev->set_timeout_s(kTimeoutS);
  EXPECT_NO_THROW(stream->synchronize());
  EXPECT_TRUE(event->query());
}

TEST(CudaDevice, RejectsStreamsAndEventsOfOtherDevices) {
  STRATA_SKIP_WITHOUT_GPU();
  auto dev = make_gpu();
  auto cpu = create_device(DeviceKind::kCpu, 0, kTimeoutS);
  Buffer buf = dev->allocate(64, MemCategory::kOther);
  EXPECT_EQ(error_code_of([&] { dev->copy(buf.data(), buf.data(), 64, cpu->compute_stream()); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { dev->fill_zero(buf.data(), 64, cpu->compute_stream()); }), ErrorCode::kInvalidArgument);
  auto cpu_event = cpu->create_event();
  EXPECT_EQ(error_code_of([&] { dev->compute_stream().record(*cpu_event); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { dev->compute_stream().wait(*cpu_event); }), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
