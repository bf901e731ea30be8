// CpuDevice tests: the memory ledger, the budget, stream order, events across streams, large copies, failures and
// timeouts.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/cpu_device.h"
#include "core/error.h"
#include "core/streaming_copy.h"

namespace strata {
namespace {

TEST(CpuDevice, LedgerTracksCurrentAndPeakPerCategory) {
  CpuDevice dev(10.0);
  auto& stats = dev.memory_stats();
  {
    Buffer a = dev.allocate(1000, MemCategory::kParamShard);
    Buffer b = dev.allocate(24, MemCategory::kParamShard);
    Buffer c = dev.allocate(512, MemCategory::kOptimState);
    EXPECT_EQ(stats.current(MemCategory::kParamShard), 1024u);
    EXPECT_EQ(stats.current(MemCategory::kOptimState), 512u);
    EXPECT_EQ(stats.current_total(), 1536u);
    b.reset();
    EXPECT_EQ(stats.current(MemCategory::kParamShard), 1000u);
    EXPECT_EQ(stats.peak(MemCategory::kParamShard), 1024u);
    Buffer moved = std::move(c);
    EXPECT_EQ(stats.current(MemCategory::kOptimState), 512u);
  }
  EXPECT_EQ(stats.current_total(), 0u);
  EXPECT_EQ(stats.peak_total(), 1536u);
  stats.reset_peaks();
  EXPECT_EQ(stats.peak_total(), 0u);
  Buffer empty = dev.allocate(0, MemCategory::kWorkspace);
  EXPECT_TRUE(static_cast<bool>(empty));
  EXPECT_EQ(empty.data(), nullptr);
}

// The CPU has no driver count of its memory: train_gpt prints the ledger alone there.
TEST(CpuDevice, HasNoDriverCount) {
  CpuDevice dev(60.0);
  Buffer b = dev.allocate(4096, MemCategory::kActivations);
  EXPECT_EQ(dev.driver_bytes_in_use(), 0u);
}

TEST(CpuDevice, BudgetIsEnforcedWithTheLedgerInTheError) {
  CpuDevice dev(10.0);
  dev.set_memory_budget(4096);
  Buffer a = dev.allocate(4000, MemCategory::kMaster);
  try {
    Buffer b = dev.allocate(200, MemCategory::kGradShard);
    FAIL() << "allocation over budget succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    std::string m = e.what();
    EXPECT_NE(m.find("grad_shard"), std::string::npos) << m;
    EXPECT_NE(m.find("master"), std::string::npos) << m;
    EXPECT_NE(m.find("4096"), std::string::npos) << m;
  }
  EXPECT_EQ(dev.memory_stats().current_total(), 4000u);
}

TEST(CpuDevice, StreamRunsTasksInOrderOnItsOwnThread) {
  CpuDevice dev(10.0);
  auto s = dev.create_stream("work");
  std::vector<int> order;
  std::atomic<bool> done{false};
  std::thread::id worker;
  for (int i = 0; i < 100; ++i) s->enqueue_host([&order, i] { order.push_back(i); });
  s->enqueue_host([&] {
    worker = std::this_thread::get_id();
    done = true;
  });
  // Without a synchronize the stream's own thread runs the work.
  while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s->synchronize();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  EXPECT_NE(worker, std::this_thread::get_id());
}

// synchronize() may run bounded work on the caller's thread, but never out of order, never beside a task the
// stream's thread is running, and never an enqueue_host task.
TEST(CpuDevice, SynchronizeRunsQueuedBoundedWorkInOrder) {
  CpuDevice dev(10.0);
  auto s = dev.create_stream("steal");
  std::atomic<bool> release{false};
  std::atomic<int> running{0}, overlapped{0};
  std::vector<int> order;
  auto task = [&](int i) {
    if (running.fetch_add(1) != 0) ++overlapped;
    order.push_back(i);
    running.fetch_sub(1);
  };
  s->enqueue_bounded([&] {  // holds the stream's thread until everything is queued
    while (!release) std::this_thread::sleep_for(std::chrono::microseconds(100));
    task(0);
  });
  for (int i = 1; i < 200; ++i) s->enqueue_bounded([&task, i] { task(i); });
  std::thread::id unbounded_on;
  s->enqueue_host([&] { unbounded_on = std::this_thread::get_id(); });
  for (int i = 200; i < 300; ++i) s->enqueue_bounded([&task, i] { task(i); });
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    release = true;
  });
  s->synchronize();
  releaser.join();
  ASSERT_EQ(order.size(), 300u);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(overlapped.load(), 0);
  EXPECT_NE(unbounded_on, std::this_thread::get_id());
  // On an idle stream a bounded task's failure still reaches synchronize and skips the work after it.
  bool ran_after = false;
  s->enqueue_bounded([] { STRATA_THROW(ErrorCode::kInternal, "stolen boom"); });
  s->enqueue_bounded([&] { ran_after = true; });
  EXPECT_THROW(s->synchronize(), Error);
  EXPECT_FALSE(ran_after);
  s->enqueue_bounded([&] { ran_after = true; });
  s->synchronize();
  EXPECT_TRUE(ran_after);
}

TEST(CpuDevice, ComputeStreamRunsInline) {
  CpuDevice dev(10.0);
  std::thread::id ran_on;
  dev.compute_stream().enqueue_host([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(CpuDevice, EventOrdersWorkAcrossStreams) {
  CpuDevice dev(10.0);
  auto producer = dev.create_stream("producer");
  auto consumer = dev.create_stream("consumer");
  auto ready = dev.create_event();
  std::atomic<int> value{0};
  int seen = -1;
  producer->enqueue_host([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    value = 42;
  });
  producer->record(*ready);
  consumer->wait(*ready);
  consumer->enqueue_host([&] { seen = value.load(); });
  consumer->synchronize();
  EXPECT_EQ(seen, 42);
  EXPECT_TRUE(ready->query());
}

TEST(CpuDevice, CopyAndFillAreStreamOrdered) {
  CpuDevice dev(10.0);
  auto s = dev.create_stream("copy");
  Buffer a = dev.allocate(64, MemCategory::kOther);
  Buffer b = dev.allocate(64, MemCategory::kOther);
  for (int i = 0; i < 16; ++i) a.as<float>()[i] = static_cast<float>(i);
  dev.copy(b.data(), a.data(), 64, *s);
  dev.fill_zero(a.data(), 64, *s);
  s->synchronize();
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(b.as<float>()[i], static_cast<float>(i));
    EXPECT_EQ(a.as<float>()[i], 0.0f);
  }
}

// A side stream's large copy goes out with streaming stores (an odd length and offsets, so the head and tail are
// plain copies): every byte arrives, and none past the end is written.
TEST(CpuDevice, LargeSideStreamCopyArrivesWhole) {
  CpuDevice dev(10.0);
  auto s = dev.create_stream("upload");
  const std::size_t n = kStreamingCopyMin + 37;
  Buffer a = dev.allocate(n + 64, MemCategory::kOther);
  Buffer b = dev.allocate(n + 64, MemCategory::kOther);
  unsigned char* src = static_cast<unsigned char*>(a.data()) + 3;
  unsigned char* dst = static_cast<unsigned char*>(b.data()) + 5;
  for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  dst[n] = 0x5a;
  dev.copy(dst, src, n, *s);
  s->synchronize();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += dst[i] != src[i];
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(dst[n], 0x5a);
}

TEST(CpuDevice, FailureSkipsLaterWorkAndReachesWaiters) {
  CpuDevice dev(10.0);
  auto s = dev.create_stream("failing");
  auto other = dev.create_stream("waiter");
  auto e = dev.create_event();
  bool ran_after = false;
  s->enqueue_host([] { STRATA_THROW(ErrorCode::kInternal, "boom"); });
  s->enqueue_host([&] { ran_after = true; });
  s->record(*e);
  other->wait(*e);
  try {
    s->synchronize();
    FAIL() << "failure not reported";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("boom"), std::string::npos);
  }
  EXPECT_FALSE(ran_after);
  try {
    other->synchronize();
    FAIL() << "waiter did not see the failure";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kInternal) << "the failure keeps its own code for the waiter";
    EXPECT_NE(std::string(err.what()).find("boom"), std::string::npos) << err.what();
  }
  // After synchronize reported it, the stream works again.
  s->enqueue_host([&] { ran_after = true; });
  s->synchronize();
  EXPECT_TRUE(ran_after);
}

TEST(CpuDevice, WaitsAreBoundedByTheTimeout) {
  CpuDevice dev(0.2);
  auto blocked = dev.create_stream("blocked");
  auto e = dev.create_event();
  std::atomic<bool> release{false};
  blocked->enqueue_host([&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  blocked->record(*e);
  try {
    e->synchronize();
    FAIL() << "wait was not bounded";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kTimeout);
    EXPECT_NE(std::string(err.what()).find("timed out after 0.2 s"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("in flight on this rank"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("host waiting on an event"), std::string::npos) << err.what();
  }
  release = true;
  dev.set_timeout_s(30.0);
  blocked->synchronize();
  EXPECT_TRUE(e->query());
}

}  // namespace
}  // namespace strata
