// CudaFlatOps: argument checks and stream lookup on the host, then the launchers of flat_ops_kernels.cu.
#include "runtime/sharding/flat_ops_cuda.h"

#include "core/cuda_check.h"
#include "core/cuda_device.h"
#include "core/error.h"
#include "runtime/sharding/flat_ops_kernels.h"

namespace strata {
namespace {

cuda_flat::Type float_type(DType t, const char* op) {
  switch (t) {
    case DType::kF32: return cuda_flat::kF32;
    case DType::kBF16: return cuda_flat::kBF16;
    case DType::kF16: return cuda_flat::kF16;
    default: break;
  }
  STRATA_THROW(ErrorCode::kInvalidArgument, "{} on non-float dtype {}", op, dtype_name(t));
}

CudaDevice& as_cuda(Device& device) {
  auto* d = dynamic_cast<CudaDevice*>(&device);
  STRATA_CHECK(d != nullptr, "CUDA flat operations need a CUDA device, not {}", device.name());
  return *d;
}

}  // namespace

CudaFlatOps::CudaFlatOps(Device& device)
    : device_(as_cuda(device)), scratch_(device.allocate(cuda_flat::kSumBlocks * 8, MemCategory::kWorkspace)) {}

void CudaFlatOps::convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
                          Stream& stream) {
  cudaStream_t s = device_.cuda_stream(stream, "convert");
  if (src_dtype == dst_dtype) {
    if (src != dst && n) STRATA_CHECK_CUDA(cudaMemcpyAsync(dst, src, n * dtype_size(src_dtype), cudaMemcpyDefault, s));
    return;
  }
  STRATA_CHECK_CUDA(cuda_flat::convert(src, float_type(src_dtype, "convert"), dst, float_type(dst_dtype, "convert"), n, s));
}

void CudaFlatOps::accumulate_f32(float* dst, const void* src, DType src_dtype, std::size_t n, Stream& stream) {
  STRATA_CHECK_CUDA(cuda_flat::accumulate_f32(dst, src, float_type(src_dtype, "accumulate_f32"), n,
                                              device_.cuda_stream(stream, "accumulate_f32")));
}

void CudaFlatOps::add_f32_into(void* dst, DType dst_dtype, const float* src, std::size_t n, Stream& stream) {
  STRATA_CHECK_CUDA(cuda_flat::add_f32_into(dst, float_type(dst_dtype, "add_f32_into"), src, n,
                                            device_.cuda_stream(stream, "add_f32_into")));
}

void CudaFlatOps::scale_f32(float* x, std::size_t n, float factor, Stream& stream) {
  STRATA_CHECK_CUDA(cuda_flat::scale_f32(x, n, factor, device_.cuda_stream(stream, "scale_f32")));
}

void CudaFlatOps::add_sum_squares(const float* x, std::size_t n, double* out, Stream& stream) {
  STRATA_CHECK_CUDA(cuda_flat::add_sum_squares(x, n, out, scratch_.as<double>(),
                                               device_.cuda_stream(stream, "add_sum_squares")));
}

}  // namespace strata
