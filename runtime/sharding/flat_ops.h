// Element-wise operations the sharding runtime applies to flat buffers in host memory (the CPU backend):
// dtype conversion, f32 accumulation, sums of squares, scaling. (The optimizer's update kernels are the optimizer's:
// runtime/optim/adamw_kernel.h.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"
#include "core/dtype.h"

namespace strata {

// dst[i] = (dst_dtype) src[i]; float types only. src == dst is allowed when the dtypes are equal (a no-op).
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n);
// dst[i] += (f32) src[i]
void accumulate_f32(float* dst, const void* src, DType src_dtype, std::size_t n);
// dst[i] = (dst_dtype) ((f32) dst[i] + src[i]): adds f32 values into a buffer of any float dtype, rounding once.
void add_f32_into(void* dst, DType dst_dtype, const float* src, std::size_t n);
// sum of x[i]^2 in double (non-finite inputs make it non-finite)
double sum_squares(const float* x, std::size_t n);
void scale_f32(float* x, std::size_t n, float factor);

// The same operations on the flat buffers of one Device, enqueued on one of its streams, so that the sharding
// runtime (and a trainer) runs them where the memory is: host loops on a CPU device (inline on the compute stream,
// on the stream's thread otherwise), kernels on a CUDA device. Pointers are that device's memory.
class FlatOps {
 public:
  virtual ~FlatOps() = default;
  virtual void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
                       Stream& stream) = 0;
  virtual void accumulate_f32(float* dst, const void* src, DType src_dtype, std::size_t n, Stream& stream) = 0;
  virtual void add_f32_into(void* dst, DType dst_dtype, const float* src, std::size_t n, Stream& stream) = 0;
  virtual void scale_f32(float* x, std::size_t n, float factor, Stream& stream) = 0;
  // *out += sum of x[i]^2 in double; `out` is one double in this device's memory.
  virtual void add_sum_squares(const float* x, std::size_t n, double* out, Stream& stream) = 0;
};

// The FlatOps for `device`'s memory: host loops for a CPU device, kernels for a CUDA device (flat_ops_cuda.cc).
std::unique_ptr<FlatOps> create_flat_ops(Device& device);
// Host loops for host memory that streams of any device may order (CUDA: through cudaLaunchHostFunc).
std::unique_ptr<FlatOps> create_host_flat_ops();

}  // namespace strata
