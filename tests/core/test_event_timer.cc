// EventTimer on the CPU device: spans are counted once they complete, and never make the host wait.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/cpu_device.h"
#include "core/error.h"
#include "core/event_timer.h"

namespace strata {
namespace {

TEST(EventTimer, CountsACompletedSpanOnceAndReusesItsEvents) {
  CpuDevice dev(10.0);
  auto stream = dev.create_stream("comm");
  EventTimer timer(dev);
  // sleep_for sleeps at least its argument, so the span cannot be shorter: a bound, not a timing assertion.
  timer.span(*stream, [&] { stream->enqueue_host([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }); });
  stream->synchronize();
  EXPECT_GE(timer.collect(), 20.0);
  EXPECT_EQ(timer.pending(), 0u);
  EXPECT_EQ(timer.collect(), 0.0);  // counted once
  timer.span(*stream, [] {});
  stream->synchronize();
  EXPECT_GE(timer.collect(), 0.0);
}

TEST(EventTimer, LeavesARunningSpanForALaterCollect) {
  CpuDevice dev(10.0);
  auto stream = dev.create_stream("comm");
  auto gate = dev.create_event();
  auto other = dev.create_stream("gate");
  std::atomic<bool> open{false};  // the gate opens only when the test says so
  other->enqueue_host([&] {
    while (!open) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  other->record(*gate);
  EventTimer timer(dev);
  timer.span(*stream, [&] { stream->wait(*gate); });
  timer.span(*stream, [] {});  // behind the first on the same stream
  EXPECT_EQ(timer.collect(), 0.0);  // nothing has completed yet: collect does not wait
  EXPECT_EQ(timer.pending(), 2u);
  open = true;
  stream->synchronize();
  EXPECT_GT(timer.collect(), 0.0);
  EXPECT_EQ(timer.pending(), 0u);
}

TEST(EventTimer, ElapsedNeedsCompletedEvents) {
  CpuDevice dev(10.0);
  auto a = dev.create_timing_event(), b = dev.create_timing_event();
  EXPECT_THROW(b->elapsed_ms_since(*a), Error);  // never recorded
  dev.compute_stream().record(*a);
  dev.compute_stream().record(*b);  // the inline compute stream completes records at once
  EXPECT_GE(b->elapsed_ms_since(*a), 0.0);
}

}  // namespace
}  // namespace strata
