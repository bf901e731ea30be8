// CudaDevice, CudaStream and CudaEvent on the CUDA runtime API, with every host wait polled against a deadline.
#include "core/cuda_device.h"

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>
#include <utility>

#include "core/backoff.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/in_flight.h"
#include "core/logging.h"
#include "core/tracer.h"
#include "core/wait_hooks.h"

namespace strata {

struct CudaFailureSlot {
  std::mutex mutex;
  bool failed = false;
  std::string message;
  ErrorCode code = ErrorCode::kInternal;  // the failure's own code, rethrown to the waiter
};

struct CudaStream::HostState {
  std::mutex mutex;
  std::exception_ptr failure;  // first failure since the last synchronize()
  std::string failure_message;
  ErrorCode failure_code = ErrorCode::kInternal;
};

namespace {



// cudaSuccess: done; cudaErrorNotReady: not yet; anything else is an error of the work waited for.
bool cuda_ready(cudaError_t rc, const char* call) {
  if (rc == cudaSuccess) return true;
  if (rc == cudaErrorNotReady) return false;
  (void)cudaGetLastError();
  STRATA_THROW(ErrorCode::kCuda, "call to {} failed: {} ({})", call, cudaGetErrorString(rc), cudaGetErrorName(rc));
}

CudaEvent& as_cuda_event(Event& event, const Stream& stream, const char* op) {
  auto* e = dynamic_cast<CudaEvent*>(&event);
  STRATA_CHECK(e != nullptr, "{} on CUDA stream '{}' was given an event that is not a CudaEvent", op, stream.name());
  return *e;
}

// One host task in flight: owned by the CUDA driver between cudaLaunchHostFunc and the callback.
struct HostTask {
  std::shared_ptr<CudaStream::HostState> state;
  std::function<void()> fn;
  bool always_run;  // event bookkeeping runs even after a failure, carrying it
};

void record_failure(CudaStream::HostState& state, std::exception_ptr failure, std::string message, ErrorCode code) {
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.failure) {
    state.failure = std::move(failure);
    state.failure_message = std::move(message);
    state.failure_code = code;
  }
}

void CUDART_CB run_host_task(void* arg) noexcept {
  std::unique_ptr<HostTask> task(static_cast<HostTask*>(arg));
  CudaStream::HostState& state = *task->state;
  if (!task->always_run) {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (state.failure) return;  // skipped, as on CpuStream, until synchronize() clears the failure
  }
  try {
    task->fn();
  } catch (const std::exception& e) {
    const auto* strata_error = dynamic_cast<const Error*>(&e);
    record_failure(state, std::current_exception(), e.what(),
                   strata_error ? strata_error->code() : ErrorCode::kInternal);
  } catch (...) {
    record_failure(state, std::current_exception(), "unknown exception in a host task", ErrorCode::kInternal);
  }
}
}  // namespace

// ---- CudaEvent --------------------------------------------------------------------------------------------------

CudaEvent::CudaEvent(int device_index, double timeout_s, bool timing)
    : device_index_(device_index), timeout_s_(timeout_s) {
  STRATA_CHECK_CUDA(cudaSetDevice(device_index_));
  STRATA_CHECK_CUDA(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

double CudaEvent::elapsed_ms_since(Event& start) {
  auto* s = dynamic_cast<CudaEvent*>(&start);
  STRATA_CHECK(s != nullptr, "elapsed_ms_since on cuda:{}: the start event is not a CUDA event", device_index_);
  float ms = 0;
  // cudaErrorInvalidResourceHandle: an event made without timing; cudaErrorNotReady: not recorded or not complete.
  STRATA_CHECK_CUDA(cudaEventElapsedTime(&ms, s->event_, event_));
  return ms;
}

CudaEvent::~CudaEvent() {
  // A recorded event still pending is released by CUDA once it completes, so this never waits.
  if (event_) (void)cudaEventDestroy(event_);
}

void CudaEvent::set_slot(std::shared_ptr<CudaFailureSlot> slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  slot_ = std::move(slot);
}

std::shared_ptr<CudaFailureSlot> CudaEvent::slot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return slot_;
}

void CudaEvent::check_slot() const {
  std::shared_ptr<CudaFailureSlot> s = slot();
  if (!s) return;
  std::lock_guard<std::mutex> lock(s->mutex);
  STRATA_CHECK_CODE(s->code, !s->failed, "event's stream failed: {}", s->message);
}

bool CudaEvent::query() {
  if (!cuda_ready(cudaEventQuery(event_), "cudaEventQuery")) return false;
  check_slot();
  return true;
}

void CudaEvent::synchronize() {
  poll_until([&] { return cuda_ready(cudaEventQuery(event_), "cudaEventQuery"); },
               [&] { return fmt::format("host waiting on an event of cuda:{}", device_index_); }, timeout_s_);
  check_slot();
}

// ---- CudaStream -------------------------------------------------------------------------------------------------

CudaStream::CudaStream(Device& device, std::string name, std::uint64_t id)
    : Stream(device, std::move(name), id), host_(std::make_shared<HostState>()) {
  STRATA_CHECK_CUDA(cudaSetDevice(device.index()));
  STRATA_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaStream::~CudaStream() {
  // Returns at once; CUDA releases the stream when its work is done. Host tasks still queued keep `host_` alive.
  if (stream_) (void)cudaStreamDestroy(stream_);
}

void CudaStream::launch_host(std::function<void()> fn, bool always_run) {
  STRATA_CHECK_CUDA(cudaSetDevice(device().index()));
  ran_host_tasks_ = true;
  auto task = std::make_unique<HostTask>(HostTask{host_, std::move(fn), always_run});
  STRATA_CHECK_CUDA(cudaLaunchHostFunc(stream_, run_host_task, task.get()));
  (void)task.release();  // run_host_task owns it now
}

void CudaStream::enqueue_host(std::function<void()> fn) { launch_host(std::move(fn), /*always_run=*/false); }

void CudaStream::record(Event& event) {
  CudaEvent& e = as_cuda_event(event, *this, "record");
  STRATA_CHECK_CUDA(cudaSetDevice(device().index()));
  std::shared_ptr<CudaFailureSlot> slot;
  if (ran_host_tasks_) {
    // Only a host task can fail a stream, so streams that never ran one skip this extra callback.
    slot = std::make_shared<CudaFailureSlot>();
    std::shared_ptr<HostState> host = host_;
    launch_host(
        [host, slot] {
          std::string message;
          bool failed;
          ErrorCode code;
          {
            std::lock_guard<std::mutex> lock(host->mutex);
            failed = host->failure != nullptr;
            message = host->failure_message;
            code = host->failure_code;
          }
          std::lock_guard<std::mutex> lock(slot->mutex);
          slot->failed = failed;
          slot->message = std::move(message);
          slot->code = code;
        },
        /*always_run=*/true);
  }
  STRATA_CHECK_CUDA(cudaEventRecord(e.handle(), stream_));
  e.set_slot(std::move(slot));
}

void CudaStream::wait(Event& event) {
  CudaEvent& e = as_cuda_event(event, *this, "wait");
  STRATA_CHECK_CUDA(cudaSetDevice(device().index()));
  // An event never recorded makes this a no-op, as on the CPU.
  STRATA_CHECK_CUDA(cudaStreamWaitEvent(stream_, e.handle(), 0));
  if (std::shared_ptr<CudaFailureSlot> slot = e.slot()) {
    std::string waiter = "stream '" + name() + "'";
    launch_host(
        [slot, waiter] {
          std::lock_guard<std::mutex> lock(slot->mutex);
          STRATA_CHECK_CODE(slot->code, !slot->failed, "{} waited on an event whose stream failed: {}", waiter,
                            slot->message);
        },
        /*always_run=*/false);
  }
}

void CudaStream::synchronize() {
  poll_until([&] { return cuda_ready(cudaStreamQuery(stream_), "cudaStreamQuery"); },
               [&] { return fmt::format("host synchronize of stream '{}' on {}", name(), device().name()); },
               device().timeout_s());
  std::exception_ptr failure;
  {
    std::lock_guard<std::mutex> lock(host_->mutex);
    std::swap(failure, host_->failure);
    host_->failure_message.clear();
  }
  if (failure) std::rethrow_exception(failure);
}

// ---- CudaDevice -------------------------------------------------------------------------------------------------

int CudaDevice::device_count() {
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();  // no driver (cudaErrorInsufficientDriver) or no device (cudaErrorNoDevice)
    return 0;
  }
  return n;
}

CudaDevice::CudaDevice(int index, double timeout_s) : Device(index, timeout_s) {
  int n = device_count();
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, index >= 0 && index < n, "cuda:{} asked for but {} GPU(s) visible",
                    index, n);
  activate();
  STRATA_CHECK_CUDA(cudaFree(nullptr));  // creates the context now, so a broken device fails here, not later
  compute_ = std::make_unique<CudaStream>(*this, "compute", next_stream_id());
  STRATA_CHECK_CUDA(cudaStreamCreateWithFlags(&transfer_, cudaStreamNonBlocking));
}

CudaDevice::~CudaDevice() {
  if (transfer_) (void)cudaStreamDestroy(transfer_);
}

void CudaDevice::activate() const { STRATA_CHECK_CUDA(cudaSetDevice(index())); }

cudaStream_t CudaDevice::cuda_stream(Stream& stream, const char* op) const {
  STRATA_CHECK(&stream.device() == this, "{} on {} was given stream '{}' of {}", op, name(), stream.name(),
               stream.device().name());
  void* handle = stream.native_handle();
  STRATA_CHECK(handle != nullptr, "{} on {} was given stream '{}', which is not a CUDA stream", op, name(),
               stream.name());
  return static_cast<cudaStream_t>(handle);
}

std::unique_ptr<Stream> CudaDevice::create_stream(const std::string& name) {
  return std::make_unique<CudaStream>(*this, name, next_stream_id());
}

std::unique_ptr<Event> CudaDevice::create_event() { return std::make_unique<CudaEvent>(index(), timeout_s()); }

std::unique_ptr<Event> CudaDevice::create_timing_event() {
  return std::make_unique<CudaEvent>(index(), timeout_s(), /*timing=*/true);
}

std::string CudaDevice::product_name() const {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index()) != cudaSuccess) return {};
  return prop.name;
}

std::size_t CudaDevice::driver_bytes_in_use() const {
  if (cudaSetDevice(index()) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  std::size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return total_bytes - free_bytes;
}

void CudaDevice::copy(void* dst, const void* src, std::size_t bytes, Stream& stream) {
  if (bytes == 0) return;
  cudaStream_t s = cuda_stream(stream, "copy");
  activate();
  STRATA_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
}

void CudaDevice::fill_zero(void* dst, std::size_t bytes, Stream& stream) {
  if (bytes == 0) return;
  cudaStream_t s = cuda_stream(stream, "fill_zero");
  activate();
  STRATA_CHECK_CUDA(cudaMemsetAsync(dst, 0, bytes, s));
}

void CudaDevice::transfer(void* dst, const void* src, std::size_t bytes, const char* what) {
  if (bytes == 0) return;
  activate();
  // A plain cudaMemcpy would wait without a bound; an async copy on our own stream plus a polled wait does not.
  STRATA_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, transfer_));
  poll_until([&] { return cuda_ready(cudaStreamQuery(transfer_), "cudaStreamQuery"); },
               [&] { return fmt::format("{} of {} bytes on {}", what, bytes, name()); }, timeout_s());
}

void CudaDevice::copy_to_host(void* host_dst, const void* dev_src, std::size_t bytes) {
  transfer(host_dst, dev_src, bytes, "copy_to_host");
}

void CudaDevice::copy_from_host(void* dev_dst, const void* host_src, std::size_t bytes) {
  transfer(dev_dst, host_src, bytes, "copy_from_host");
}

void* CudaDevice::raw_allocate(std::size_t bytes, MemCategory) {
  activate();
  void* ptr = nullptr;
  cudaError_t rc = cudaMalloc(&ptr, bytes);
  if (rc == cudaSuccess) return ptr;
  (void)cudaGetLastError();
  if (rc == cudaErrorMemoryAllocation) {
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
    STRATA_THROW(ErrorCode::kOutOfMemory,
                 "cudaMalloc of {} bytes on {} failed: out of memory ({} of {} bytes free on the GPU); "
                 "Strata's allocations on this device:\n{}",
                 bytes, name(), free_bytes, total_bytes, memory_report());
  }
  STRATA_THROW(ErrorCode::kCuda, "call to cudaMalloc({} bytes) on {} failed: {} ({})", bytes, name(),
               cudaGetErrorString(rc), cudaGetErrorName(rc));
}

void CudaDevice::raw_free(void* ptr) {
  // Called from Buffer's destructor: reports, never throws. cudaFree synchronises the device; a hung NCCL kernel
  // cannot stall it for long, since a timed-out wait aborts the communicators (WaitHooks) before unwinding.
  (void)cudaSetDevice(index());
  cudaError_t rc = cudaFree(ptr);
  if (rc == cudaSuccess || rc == cudaErrorCudartUnloading) return;
  (void)cudaGetLastError();
  try {
    logger("mem").error("cudaFree({}) on {} failed: {} ({})", ptr, name(), cudaGetErrorString(rc),
                        cudaGetErrorName(rc));
  } catch (...) {  // logging must not turn a failed free into std::terminate
  }
}

void install_nvtx_ranges() {
  Tracer::global().set_range_hooks([](const char* name) { nvtxRangePushA(name); }, [] { nvtxRangePop(); });
}

void* PinnedHostDevice::raw_allocate(std::size_t bytes, MemCategory) {
  STRATA_CHECK_CUDA(cudaSetDevice(cuda_index_));
  void* ptr = nullptr;
  cudaError_t rc = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable);
  if (rc == cudaSuccess) return ptr;
  (void)cudaGetLastError();
  STRATA_THROW(rc == cudaErrorMemoryAllocation ? ErrorCode::kOutOfMemory : ErrorCode::kCuda,
               "cudaHostAlloc of {} bytes of page-locked host memory failed: {} ({}); Strata's host allocations:\n{}",
               bytes, cudaGetErrorString(rc), cudaGetErrorName(rc), memory_report());
}

void PinnedHostDevice::raw_free(void* ptr) {
  cudaError_t rc = cudaFreeHost(ptr);
  if (rc == cudaSuccess || rc == cudaErrorCudartUnloading) return;
  (void)cudaGetLastError();
  try {
    logger("mem").error("cudaFreeHost({}) failed: {} ({})", ptr, cudaGetErrorString(rc), cudaGetErrorName(rc));
  } catch (...) {
  }
}

}  // namespace strata
