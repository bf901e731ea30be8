// CpuDevice, CpuStream (a task queue and its thread) and CpuEvent (a generation counter with a condition variable).
#include "core/cpu_device.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/backoff.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/in_flight.h"
#include "core/shared_host_memory.h"
#include "core/streaming_copy.h"
#include "core/tracer.h"
#include "core/wait_hooks.h"

namespace strata {
namespace {
constexpr std::size_t kHostAlignment = 64;
// How long an idle stream thread polls for new work before it sleeps.
constexpr auto kIdlePoll = std::chrono::microseconds(50);

}  // namespace

// ---- CpuEvent ---------------------------------------------------------------------------------------------------

std::uint64_t CpuEventState::arm() {
  std::lock_guard<std::mutex> lock(mutex_);
  return ++armed_;
}

std::uint64_t CpuEventState::armed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return armed_;
}

void CpuEventState::complete(std::uint64_t generation, const std::string& failure, ErrorCode failure_code) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (generation > completed_) {
      completed_ = generation;
      completed_at_ = std::chrono::steady_clock::now();
    }
    if (!failure.empty()) {
      failure_ = failure;
      failure_code_ = failure_code;
    }
  }
  cv_.notify_all();
}

bool CpuEventState::completed_at(std::chrono::steady_clock::time_point* when) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (armed_ == 0 || completed_ < armed_) return false;
  *when = completed_at_;
  return true;
}

double CpuEvent::elapsed_ms_since(Event& start) {
  auto* s = dynamic_cast<CpuEvent*>(&start);
  STRATA_CHECK(s != nullptr, "elapsed_ms_since: the start event is not a CPU event");
  std::chrono::steady_clock::time_point t0, t1;
  STRATA_CHECK(s->state_->completed_at(&t0), "elapsed_ms_since: the start event was not recorded or has not completed");
  STRATA_CHECK(state_->completed_at(&t1), "elapsed_ms_since: the event was not recorded or has not completed");
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

bool CpuEventState::query() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (completed_ < armed_) return false;
  STRATA_CHECK_CODE(failure_code_, failure_.empty(), "event's stream failed: {}", failure_);
  return true;
}

void CpuEventState::wait_for(std::uint64_t generation, const char* waiter) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (completed_ < generation) {
    InFlightScope scope(fmt::format("{} waiting on an event (generation {})", waiter, generation));
    // Wakes every 5 ms to run the WaitHooks pollers (the side channel: a peer that left, a peer asking what this
    // rank waits in), with the lock released since a poller may throw.
    const auto deadline = std::chrono::steady_clock::now() + to_duration(timeout_s_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(5), [&] { return completed_ >= generation; })) {
      lock.unlock();
      if (std::chrono::steady_clock::now() >= deadline)
        throw_timeout(__FILE__, __LINE__, fmt::format("{}: wait on an event", waiter), timeout_s_);
      WaitHooks::poll();
      lock.lock();
    }
  }
  STRATA_CHECK_CODE(failure_code_, failure_.empty(), "{} waited on an event whose stream failed: {}", waiter,
                    failure_);
}

// ---- CpuStream --------------------------------------------------------------------------------------------------

CpuStream::CpuStream(Device& device, std::string name, std::uint64_t id, bool threaded)
    : Stream(device, std::move(name), id), threaded_(threaded) {
  if (threaded_) worker_ = std::thread([this] { run(); });
}

CpuStream::~CpuStream() {
  if (!threaded_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void CpuStream::push(std::function<void()> fn, bool always_run, bool bounded) {
  if (!threaded_) {
    fn();  // inline: exceptions reach the caller directly
    return;
  }
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(Task{std::move(fn), always_run, bounded});
    wake = sleeping_;
  }
  pushed_.fetch_add(1, std::memory_order_release);
  if (wake) cv_.notify_all();
}

void CpuStream::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  auto ready = [&] { return stopping_ || (!queue_.empty() && !running_); };
  for (;;) {
    if (!ready()) {
      // Idle: look for new work for a moment (yielding the core to whoever needs it) before sleeping, since waking
      // a sleeping thread costs more than the small collective that usually comes next.
      const std::uint64_t seen = pushed_.load(std::memory_order_acquire);
      lock.unlock();
      const auto until = std::chrono::steady_clock::now() + kIdlePoll;
      while (pushed_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
      lock.lock();
      sleeping_ = true;
      cv_.wait(lock, ready);
      sleeping_ = false;
    }
    if (queue_.empty()) return;  // stopping and drained
    run_front(lock);
  }
}

void CpuStream::run_front(std::unique_lock<std::mutex>& lock) {
  Task task = std::move(queue_.front());
  queue_.pop_front();
  running_ = true;
  bool failed = failure_ != nullptr;
  lock.unlock();
  if (!failed || task.always_run) {
    try {
      task.fn();
    } catch (const std::exception& e) {
      lock.lock();
      if (!failure_) {
        failure_ = std::current_exception();
        failure_message_ = e.what();
        const auto* strata_error = dynamic_cast<const Error*>(&e);
        failure_code_ = strata_error ? strata_error->code() : ErrorCode::kInternal;
      }
      lock.unlock();
    }
  }
  lock.lock();
  running_ = false;
}

std::string CpuStream::failure_text() const { return failure_ ? failure_message_ : std::string(); }

void CpuStream::enqueue_host(std::function<void()> fn) { push(std::move(fn), false, false); }

void CpuStream::enqueue_bounded(std::function<void()> fn) { push(std::move(fn), false, true); }

void CpuStream::record(Event& event) {
  std::shared_ptr<CpuEventState> e = static_cast<CpuEvent&>(event).state();
  std::uint64_t generation = e->arm();
  if (!threaded_) {
    e->complete(generation, "", ErrorCode::kInternal);
    return;
  }
  push(
      [this, e, generation] {
        std::string failure;
        ErrorCode code;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          failure = failure_text();
          code = failure_code_;
        }
        e->complete(generation, failure, code);
      },
      true, true);
}

void CpuStream::wait(Event& event) {
  std::shared_ptr<CpuEventState> e = static_cast<CpuEvent&>(event).state();
  std::uint64_t generation = e->armed();
  if (generation == 0) return;  // never recorded: nothing to wait for (as cudaStreamWaitEvent)
  std::string waiter = "stream '" + name() + "'";
  push([e, generation, waiter] { e->wait_for(generation, waiter.c_str()); }, false, true);
}

void CpuStream::synchronize() {
  if (!threaded_) return;
  {
    // The caller would only wait: while the worker is not running a task, the caller runs the queued ones itself, in
    // order, and skips the two thread wake-ups of a hand-off (a small collective costs less than one of them).
    std::unique_lock<std::mutex> lock(mutex_);
    while (!running_ && !queue_.empty() && queue_.front().bounded) run_front(lock);
    if (!running_ && queue_.empty()) {
      std::exception_ptr failure;
      std::swap(failure, failure_);
      failure_message_.clear();
      lock.unlock();
      if (failure) std::rethrow_exception(failure);
      return;
    }
  }
  auto done = std::make_shared<CpuEventState>(device().timeout_s());
  std::uint64_t generation = done->arm();
  push([done, generation] { done->complete(generation, "", ErrorCode::kInternal); }, true, true);
  std::string waiter = "host synchronize of stream '" + name() + "'";
  done->wait_for(generation, waiter.c_str());
  std::exception_ptr failure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::swap(failure, failure_);
    failure_message_.clear();
  }
  if (failure) std::rethrow_exception(failure);
}

// ---- CpuDevice --------------------------------------------------------------------------------------------------

CpuDevice::CpuDevice(double timeout_s, std::string label) : Device(0, timeout_s) {
  if (!label.empty()) set_label(std::move(label));
  compute_ = std::make_unique<CpuStream>(*this, "compute", next_stream_id(), /*threaded=*/false);
}

std::unique_ptr<Stream> CpuDevice::create_stream(const std::string& name) {
  return std::make_unique<CpuStream>(*this, name, next_stream_id(), /*threaded=*/true);
}

std::unique_ptr<Event> CpuDevice::create_event() { return std::make_unique<CpuEvent>(timeout_s()); }

void CpuDevice::copy(void* dst, const void* src, std::size_t bytes, Stream& stream) {
  if (bytes == 0) return;
  const bool side = &stream != compute_.get();
  // A large copy on a side stream (an upload ahead of its use, an offload) is not read back before it leaves the
  // cache: streaming stores, which skip reading each destination line first, and which glibc's memcpy keeps to copies
  // above a share of the last-level cache it is told of (300 MiB on some VMs, where they copy 1.5x as fast).
  const bool streaming = side && bytes >= kStreamingCopyMin;
  auto body = [=] {
    if (streaming) {
      copy_streaming(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
      stream_fence();
    } else {
      std::memcpy(dst, src, bytes);
    }
  };
  if (!side || !Tracer::global().enabled()) {
    stream.enqueue_bounded(body);
    return;
  }
  // A copy on a side stream (offload's uploads, gradient shards coming back) is a span on that stream's track.
  stream.enqueue_bounded([body, bytes, track = stream.name()] {
    TraceSpan span("copy", "copy", track, fmt::format(R"("bytes":{})", bytes));
    body();
  });
}

void CpuDevice::fill_zero(void* dst, std::size_t bytes, Stream& stream) {
  if (bytes == 0) return;
  stream.enqueue_bounded([=] { std::memset(dst, 0, bytes); });
}

void CpuDevice::copy_to_host(void* host_dst, const void* dev_src, std::size_t bytes) {
  if (bytes) std::memcpy(host_dst, dev_src, bytes);
}

void CpuDevice::copy_from_host(void* dev_dst, const void* host_src, std::size_t bytes) {
  if (bytes) std::memcpy(dev_dst, host_src, bytes);
}

void* CpuDevice::raw_allocate(std::size_t bytes, MemCategory category) {
  // An impossible size fails here, named, not as a bare bad_alloc or when the memory is first touched (the message is
  // formatted only then).
  const std::uint64_t in_use = memory_stats().current_total();
  if (!host_allocation_fits(bytes, in_use))
    check_host_allocation(bytes, in_use, fmt::format("allocating {} on {}", mem_category_name(category), name()));
  // What a collective reads goes where a peer on this machine can read it in place (core/shared_host_memory.h).
  if (SharedHostMemory::wants(bytes, category))
    if (void* p = SharedHostMemory::allocate(bytes)) return p;
  std::size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  void* p = std::aligned_alloc(kHostAlignment, rounded);
  STRATA_CHECK_CODE(ErrorCode::kOutOfMemory, p != nullptr, "allocating {} on {}: {} could not be allocated",
                    mem_category_name(category), name(), bytes_text(bytes));
  return p;
}

void CpuDevice::raw_free(void* ptr) {
  if (!SharedHostMemory::release(ptr)) std::free(ptr);
}

}  // namespace strata
