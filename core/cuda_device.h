// CudaDevice, CudaStream and CudaEvent: the Device seam on one GPU (cudaMalloc, non-blocking streams, events).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/cpu_device.h"
#include "core/device.h"

namespace strata {

// What a stream's failed host task leaves behind for the events recorded after it (see CudaStream::record).
struct CudaFailureSlot;

// A cudaEvent_t (cudaEventDisableTiming unless made for timing). As with CpuEvent, waiting on an event recorded on a stream whose host task
// failed reports that failure (with its own ErrorCode). Waits poll and are bounded by the device timeout.
class CudaEvent : public Event {
 public:
  CudaEvent(int device_index, double timeout_s, bool timing = false);
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  bool query() override;
  void synchronize() override;
  double elapsed_ms_since(Event& start) override;
  cudaEvent_t handle() const { return event_; }

 private:
  friend class CudaStream;
  void set_slot(std::shared_ptr<CudaFailureSlot> slot);
  std::shared_ptr<CudaFailureSlot> slot() const;
  void check_slot() const;

  int device_index_;
  double timeout_s_;
  cudaEvent_t event_ = nullptr;
  mutable std::mutex mutex_;
  std::shared_ptr<CudaFailureSlot> slot_;  // set by the last record() on a stream that ran host tasks
};

// A cudaStream_t created with cudaStreamNonBlocking (no implicit ordering with the legacy default stream).
// enqueue_host uses cudaLaunchHostFunc: the function runs on a CUDA driver thread and must not call CUDA or NCCL.
// As on CpuStream, an exception thrown by a host task is captured, the stream's later host tasks are skipped, and
// synchronize() rethrows it (and clears it); device work keeps running.
class CudaStream : public Stream {
 public:
  CudaStream(Device& device, std::string name, std::uint64_t id);
  ~CudaStream() override;

  void record(Event& event) override;
  void wait(Event& event) override;
  void synchronize() override;
  void enqueue_host(std::function<void()> fn) override;
  void* native_handle() override { return stream_; }
  cudaStream_t handle() const { return stream_; }

  // Host-task failure state, shared with the tasks in flight so that it outlives the stream if need be.
  struct HostState;

 private:
  void launch_host(std::function<void()> fn, bool always_run);

  cudaStream_t stream_ = nullptr;
  std::shared_ptr<HostState> host_;
  std::atomic<bool> ran_host_tasks_{false};  // record() tracks failures only on streams that ran host tasks
};

class CudaDevice : public Device {
 public:
  // Makes cuda:index current on the calling thread and creates the compute stream.
  CudaDevice(int index, double timeout_s);
  ~CudaDevice() override;

  // Visible GPUs; 0 (never an exception) when there is no driver or no device.
  static int device_count();

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  Stream& compute_stream() override { return *compute_; }
  std::unique_ptr<Stream> create_stream(const std::string& name) override;
  std::unique_ptr<Event> create_event() override;
  std::unique_ptr<Event> create_timing_event() override;
  std::string product_name() const override;
  std::size_t driver_bytes_in_use() const override;
  // Stream-ordered cudaMemcpyAsync (cudaMemcpyDefault: device or host pointers) and cudaMemsetAsync on `stream`,
  // which must be a stream of this device.
  void copy(void* dst, const void* src, std::size_t bytes, Stream& stream) override;
  void fill_zero(void* dst, std::size_t bytes, Stream& stream) override;
  // Synchronous for the caller, not ordered with any Stream (as on the CPU): synchronise the streams that wrote
  // `dev_src` first. Run on an internal stream with a bounded wait.
  void copy_to_host(void* host_dst, const void* dev_src, std::size_t bytes) override;
  void copy_from_host(void* dev_dst, const void* host_src, std::size_t bytes) override;

  // Makes this device current on the calling thread.
  void activate() const;
  // The cudaStream_t of `stream`, after checking that it is a CUDA stream of this device; `op` names the caller.
  cudaStream_t cuda_stream(Stream& stream, const char* op) const;

 protected:
  void* raw_allocate(std::size_t bytes, MemCategory category) override;
  void raw_free(void* ptr) override;

 private:
  void transfer(void* dst, const void* src, std::size_t bytes, const char* what);

  std::unique_ptr<CudaStream> compute_;
  cudaStream_t transfer_ = nullptr;  // copy_to_host / copy_from_host; no Stream id, so ids match the CPU device's
};

// Makes every Tracer range (TraceSpan, the sharded model's forward / backward) an NVTX range, for Nsight Systems.
void install_nvtx_ranges();

// Page-locked host memory beside cuda:index (the offload target): a CpuDevice whose allocations are cudaHostAlloc'd
// so that copies to and from the GPU run asynchronously on its streams.
class PinnedHostDevice : public CpuDevice {
 public:
  PinnedHostDevice(int cuda_index, double timeout_s) : CpuDevice(timeout_s, "host"), cuda_index_(cuda_index) {}

 protected:
  void* raw_allocate(std::size_t bytes, MemCategory category) override;
  void raw_free(void* ptr) override;

 private:
  int cuda_index_;
};

}  // namespace strata
