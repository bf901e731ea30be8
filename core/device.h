// The Device seam: memory (tagged by MemCategory), streams and events. CPU and CUDA implement it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/memory_stats.h"

namespace strata {

enum class DeviceKind { kCpu, kCuda };
const char* device_kind_name(DeviceKind k);

class Device;

// Marks a point in a stream. record() captures the work enqueued so far; waits are bounded by the device timeout.
class Event {
 public:
  virtual ~Event() = default;
  // True when the captured work has finished. Throws strata::Error if that work failed.
  virtual bool query() = 0;
  // The host waits for the captured work; throws on failure or after timeout_s.
  virtual void synchronize() = 0;
  // Milliseconds from `start`'s completion to this event's, both made by create_timing_event() on the same device,
  // recorded, and completed (synchronize() first). kInvalidArgument otherwise. On CUDA this is GPU time
  // (cudaEventElapsedTime), so it measures a stream's work, not the host's waits.
  virtual double elapsed_ms_since(Event& start) = 0;
};

// An ordered queue of work. CUDA: a cudaStream_t. CPU: a thread running tasks in order, or (the compute stream)
// the calling thread itself. See docs/architecture.md, "Streams".
class Stream {
 public:
  Stream(Device& device, std::string name, std::uint64_t id) : device_(device), name_(std::move(name)), id_(id) {}
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device& device() const { return device_; }
  const std::string& name() const { return name_; }
  // Creation order on the device: equal across ranks that create streams in the same order.
  std::uint64_t id() const { return id_; }

  virtual void record(Event& event) = 0;
  // Work enqueued after this call starts only when `event`'s captured work has finished.
  virtual void wait(Event& event) = 0;
  // The host waits for everything enqueued so far; rethrows the first failure of a task (and clears it).
  virtual void synchronize() = 0;
  // Runs `fn` on the host in stream order. Exceptions are captured and rethrown by synchronize().
  virtual void enqueue_host(std::function<void()> fn) = 0;
  // enqueue_host for work whose every wait is bounded by the device timeout (collectives, copies): a CPU stream may
  // run it on the thread that calls synchronize() while its own thread is idle, sparing the hand-off.
  virtual void enqueue_bounded(std::function<void()> fn) { enqueue_host(std::move(fn)); }
  // cudaStream_t for CUDA streams; nullptr on the CPU.
  virtual void* native_handle() { return nullptr; }

 private:
  Device& device_;
  std::string name_;
  std::uint64_t id_;
};

// An owned allocation tagged with its MemCategory; frees itself (and updates the ledger) when destroyed.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device* device, void* data, std::size_t bytes, MemCategory category)
      : device_(device), data_(data), bytes_(bytes), category_(category) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }
  MemCategory category() const { return category_; }
  Device* device() const { return device_; }
  explicit operator bool() const { return device_ != nullptr; }
  void reset();

 private:
  Device* device_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  MemCategory category_ = MemCategory::kOther;
};

class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual DeviceKind kind() const = 0;
  int index() const { return index_; }
  std::string name() const;  // "cpu", "cuda:1", or the label given at construction ("host")

  // Allocates `bytes` (a zero-byte request gives an empty Buffer that is still valid). Enforces the memory
  // budget: going over it throws kOutOfMemory with the ledger.
  Buffer allocate(std::size_t bytes, MemCategory category);
  MemoryStats& memory_stats() { return stats_; }
  const MemoryStats& memory_stats() const { return stats_; }
  // 0: unlimited.
  void set_memory_budget(std::size_t bytes) { budget_ = bytes; }
  std::size_t memory_budget() const { return budget_; }
  // One line per category with current and peak bytes.
  std::string memory_report() const;

  // The stream the caller computes on. CPU: work runs inline on the calling thread.
  virtual Stream& compute_stream() = 0;
  virtual std::unique_ptr<Stream> create_stream(const std::string& name) = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  // An event that also records when it completed, for Event::elapsed_ms_since (CUDA: without
  // cudaEventDisableTiming, so a little dearer to record than create_event's).
  virtual std::unique_ptr<Event> create_timing_event() = 0;
  // The hardware's name as its driver reports it ("NVIDIA H200"); empty where there is none to report (the CPU).
  virtual std::string product_name() const { return {}; }
  // Bytes in use on the hardware as its driver counts them (CUDA: cudaMemGetInfo's total - free, which holds the CUDA
  // context, library workspaces, NCCL's buffers and other processes' memory beside the ledger's); 0 where the driver
  // reports none (the CPU).
  virtual std::size_t driver_bytes_in_use() const { return 0; }

  // Stream-ordered copy and fill of memory of this device (or host memory, for CUDA: cudaMemcpyDefault).
  virtual void copy(void* dst, const void* src, std::size_t bytes, Stream& stream) = 0;
  virtual void fill_zero(void* dst, std::size_t bytes, Stream& stream) = 0;
  // Synchronous copies between host memory and this device's memory (for tests, set-up and checkpoints).
  virtual void copy_to_host(void* host_dst, const void* dev_src, std::size_t bytes) = 0;
  virtual void copy_from_host(void* dev_dst, const void* host_src, std::size_t bytes) = 0;

  // Bound on every wait this device performs (STRATA_TIMEOUT_S by default).
  double timeout_s() const { return timeout_s_; }
  void set_timeout_s(double seconds) { timeout_s_ = seconds; }

 protected:
  Device(int index, double timeout_s) : index_(index), timeout_s_(timeout_s) {}
  std::uint64_t next_stream_id() { return next_stream_id_++; }
  void set_label(std::string label) { label_ = std::move(label); }
  virtual void* raw_allocate(std::size_t bytes, MemCategory category) = 0;
  virtual void raw_free(void* ptr) = 0;

 private:
  friend class Buffer;
  void release(void* ptr, std::size_t bytes, MemCategory category);

  int index_;
  double timeout_s_;
  std::string label_;
  std::size_t budget_ = 0;
  std::uint64_t next_stream_id_ = 0;
  MemoryStats stats_;
};

}  // namespace strata
