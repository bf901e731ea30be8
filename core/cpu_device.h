// CpuDevice: host memory; streams are ordered task queues run by their own thread (the compute stream runs inline).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/device.h"
#include "core/error.h"

namespace strata {

// Completion state shared (by shared_ptr) between a CpuEvent and the stream tasks that record and wait on it,
// so an event may be destroyed while a stream still holds work that refers to it (as with CUDA events).
class CpuEventState {
 public:
  explicit CpuEventState(double timeout_s) : timeout_s_(timeout_s) {}
  bool query();

  // Called by CpuStream::record: the generation the next completion will reach.
  std::uint64_t arm();
  // Called when the stream reaches the record point; `failure` is non-empty when the stream had failed, and
  // `failure_code` is that failure's ErrorCode.
  void complete(std::uint64_t generation, const std::string& failure, ErrorCode failure_code);
  // Blocks until `generation` completed (bounded). Throws if the recording stream failed, with the failure's own
  // ErrorCode (an allocation over budget on a communication stream stays kOutOfMemory for the waiter).
  void wait_for(std::uint64_t generation, const char* waiter);
  std::uint64_t armed() const;
  // When the last armed generation completed; false while it has not.
  bool completed_at(std::chrono::steady_clock::time_point* when) const;

 private:
  double timeout_s_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::uint64_t armed_ = 0;
  std::uint64_t completed_ = 0;
  std::chrono::steady_clock::time_point completed_at_{};
  std::string failure_;
  ErrorCode failure_code_ = ErrorCode::kInternal;
};

class CpuEvent : public Event {
 public:
  explicit CpuEvent(double timeout_s) : state_(std::make_shared<CpuEventState>(timeout_s)) {}
  bool query() override { return state_->query(); }
  void synchronize() override { state_->wait_for(state_->armed(), "host"); }
  double elapsed_ms_since(Event& start) override;
  const std::shared_ptr<CpuEventState>& state() const { return state_; }

 private:
  std::shared_ptr<CpuEventState> state_;
};

class CpuStream : public Stream {
 public:
  // threaded = false: the inline compute stream, whose work runs on the caller's thread at once.
  CpuStream(Device& device, std::string name, std::uint64_t id, bool threaded);
  ~CpuStream() override;

  void record(Event& event) override;
  void wait(Event& event) override;
  void synchronize() override;
  void enqueue_host(std::function<void()> fn) override;
  void enqueue_bounded(std::function<void()> fn) override;

 private:
  struct Task {
    std::function<void()> fn;
    bool always_run;  // event completions run even after a failure, carrying it
    bool bounded;     // synchronize() may run it on the caller's thread (its waits end by the timeout)
  };
  void push(std::function<void()> fn, bool always_run, bool bounded);
  void run();
  // Pops the front task and runs it on this thread with `lock` released, recording its failure; `lock` is held on
  // entry and on return.
  void run_front(std::unique_lock<std::mutex>& lock);
  std::string failure_text() const;

  bool threaded_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  bool running_ = false;           // a task is running (on the worker, or on a thread in synchronize())
  bool sleeping_ = false;          // the worker waits on cv_ (push wakes it only then)
  std::atomic<std::uint64_t> pushed_{0};  // tasks pushed so far, which the idle worker polls
  std::exception_ptr failure_;     // first failure since the last synchronize()
  std::string failure_message_;
  ErrorCode failure_code_ = ErrorCode::kInternal;
  std::thread worker_;
};

class CpuDevice : public Device {
 public:
  // `label` names the device in reports and errors ("host" for the offload memory of another device).
  explicit CpuDevice(double timeout_s, std::string label = {});
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  Stream& compute_stream() override { return *compute_; }
  std::unique_ptr<Stream> create_stream(const std::string& name) override;
  std::unique_ptr<Event> create_event() override;
  std::unique_ptr<Event> create_timing_event() override { return create_event(); }  // every CpuEvent keeps its time
  void copy(void* dst, const void* src, std::size_t bytes, Stream& stream) override;
  void fill_zero(void* dst, std::size_t bytes, Stream& stream) override;
  void copy_to_host(void* host_dst, const void* dev_src, std::size_t bytes) override;
  void copy_from_host(void* dev_dst, const void* host_src, std::size_t bytes) override;

 protected:
  void* raw_allocate(std::size_t bytes, MemCategory category) override;
  void raw_free(void* ptr) override;

 private:
  std::unique_ptr<CpuStream> compute_;
};

}  // namespace strata
