// Blas (a cuBLAS handle on one stream) and the cuBLAS-backed matmuls of kernels/cuda/ops.h.
//
// cuBLAS is column-major: a row-major [R, K] array is the column-major K x R matrix, its transpose. So a row-major
// product Y = X W is computed as the column-major Y^T = W^T X^T with the same buffers, and each call below is
// annotated with the row-major product it computes.
#include <fmt/format.h>

#include "kernels/cuda/ops.h"
#include "kernels/cuda/launch.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "runtime/sharding/flat_ops_kernels.h"

// STRATA_CHECK_CUBLAS(call): throws strata::Error(kCuda) naming the cuBLAS call and its status.
#define STRATA_CHECK_CUBLAS(call)                                                                              \
  do {                                                                                                         \
    cublasStatus_t strata_cublas_rc_ = (call);                                                                 \
    if (strata_cublas_rc_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                               \
      ::strata::throw_error(::strata::ErrorCode::kCuda, __FILE__, __LINE__,                                    \
                            ::fmt::format("call to {} failed: {} ({})", #call,                                 \
                                          cublasGetStatusString(strata_cublas_rc_),                            \
                                          cublasGetStatusName(strata_cublas_rc_)));                            \
  } while (0)

namespace strata::cuda {
namespace {

std::size_t element_bytes(cudaDataType_t type) { return type == CUDA_R_16BF ? 2 : 4; }

// Column-major C[m x n] = op(A) op(B) + beta C with A and B of `type` and C of `c_type`, accumulated in f32
// (CUBLAS_COMPUTE_32F: under the handle's default math mode, no TF32). beta is 0 or 1. With k = 0 the product is
// empty.
void gemm(Blas& blas, cudaDataType_t type, bool ta, bool tb, int m, int n, int k, const void* A, int lda,
          const void* B, int ldb, float beta, void* C, int ldc, cudaDataType_t c_type) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0.0f)
      STRATA_CHECK_CUDA(
          cudaMemset2DAsync(C, ldc * element_bytes(c_type), 0, m * element_bytes(c_type), n, blas.stream()));
    return;
  }
  const float alpha = 1.0f;
  STRATA_CHECK_CUBLAS(cublasGemmEx(blas.handle(), ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m,
                                   n, k, &alpha, A, type, lda, B, type, ldb, &beta, C, c_type, ldc, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
}

void gemm(Blas& blas, cudaDataType_t type, bool ta, bool tb, int m, int n, int k, const void* A, int lda,
          const void* B, int ldb, float beta, void* C, int ldc) {
  gemm(blas, type, ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc, type);
}

void check_sizes(int N, int K, int M) {
  STRATA_CHECK(N >= 0 && K >= 0 && M >= 0, "matrix sizes must not be negative: {}, {}, {}", N, K, M);
}

}  // namespace

Blas::Blas(cudaStream_t stream) : stream_(stream) {
  STRATA_CHECK_CUBLAS(cublasCreate(&handle_));
  try {
    STRATA_CHECK_CUBLAS(cublasSetStream(handle_, stream));
    STRATA_CHECK_CUBLAS(cublasSetMathMode(
        handle_, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  } catch (...) {
    (void)cublasDestroy(handle_);
    throw;
  }
}

Blas::~Blas() { (void)cublasDestroy(handle_); }

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC,
                    Blas& blas) {
  check_sizes(N, IC, OC);
  float beta = 0.0f;
  if (bias != nullptr) {  // out starts as the bias rows and the product is accumulated onto it (as the CPU)
    STRATA_CHECK_CUDA(detail::launch_fill_rows(out, bias, N, OC, blas.stream()));
    beta = 1.0f;
  }
  gemm(blas, CUDA_R_32F, false, false, OC, N, IC, weight, OC, inp, IC, beta, out, OC);  // out = inp @ weight
}

void matmul_forward_bf16(__nv_bfloat16* out, const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                         const __nv_bfloat16* bias, int N, int IC, int OC, Blas& blas, float* f32_workspace) {
  check_sizes(N, IC, OC);
  if (bias == nullptr) {  // cuBLAS rounds the f32 accumulator to bf16 once
    gemm(blas, CUDA_R_16BF, false, false, OC, N, IC, weight, OC, inp, IC, 0.0f, out, OC);  // out = inp @ weight
    return;
  }
  STRATA_CHECK(f32_workspace != nullptr || N == 0 || OC == 0,
               "matmul_forward_bf16 with a bias needs an f32 workspace of N * OC = {} floats", std::size_t(N) * OC);
  // f32 bias rows, the product accumulated onto them in f32, then one rounding to bf16.
  STRATA_CHECK_CUDA(detail::launch_fill_rows(f32_workspace, bias, N, OC, blas.stream()));
  gemm(blas, CUDA_R_16BF, false, false, OC, N, IC, weight, OC, inp, IC, 1.0f, f32_workspace, OC, CUDA_R_32F);
  STRATA_CHECK_CUDA(cuda_flat::convert(f32_workspace, cuda_flat::kF32, out, cuda_flat::kBF16,
                                       static_cast<std::size_t>(N) * OC, blas.stream()));  // to nearest even
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC, Blas& blas) {
  check_sizes(N, IC, OC);
  if (dinp != nullptr)
    gemm(blas, CUDA_R_32F, true, false, IC, N, OC, weight, OC, dout, OC, 1.0f, dinp, IC);  // dinp += dout @ weight^T
  gemm(blas, CUDA_R_32F, false, true, OC, IC, N, dout, OC, inp, IC, 1.0f, dweight, OC);    // dweight += inp^T @ dout
  if (dbias != nullptr) STRATA_CHECK_CUDA(detail::launch_add_column_sums(dbias, dout, N, OC, blas.stream()));
}

void matmul_forward_bf16_operands(float* out, const __nv_bfloat16* inp, const __nv_bfloat16* weight, const float* bias,
                                  int N, int IC, int OC, Blas& blas) {
  check_sizes(N, IC, OC);
  float beta = 0.0f;
  if (bias != nullptr) {  // out starts as the f32 bias rows and the product is accumulated onto them
    STRATA_CHECK_CUDA(detail::launch_fill_rows(out, bias, N, OC, blas.stream()));
    beta = 1.0f;
  }
  gemm(blas, CUDA_R_16BF, false, false, OC, N, IC, weight, OC, inp, IC, beta, out, OC, CUDA_R_32F);  // inp @ weight
}

void matmul_backward_bf16_operands(float* dinp, float* dweight, const __nv_bfloat16* dout, const __nv_bfloat16* inp,
                                   const __nv_bfloat16* weight, int N, int IC, int OC, Blas& blas) {
  check_sizes(N, IC, OC);
  if (dinp != nullptr)  // dinp += dout @ weight^T
    gemm(blas, CUDA_R_16BF, true, false, IC, N, OC, weight, OC, dout, OC, 1.0f, dinp, IC, CUDA_R_32F);
  gemm(blas, CUDA_R_16BF, false, true, OC, IC, N, dout, OC, inp, IC, 1.0f, dweight, OC, CUDA_R_32F);  // inp^T @ dout
}

void lm_head_forward_bf16_operands(float* logits, const __nv_bfloat16* inp, const __nv_bfloat16* wte, int N, int C,
                                   int V, Blas& blas) {
  check_sizes(N, C, V);
  gemm(blas, CUDA_R_16BF, true, false, V, N, C, wte, C, inp, C, 0.0f, logits, V, CUDA_R_32F);  // inp @ wte^T
}

void lm_head_backward_bf16_operands(float* dinp, float* dwte, const __nv_bfloat16* dlogits, const __nv_bfloat16* inp,
                                    const __nv_bfloat16* wte, int N, int C, int V, Blas& blas) {
  check_sizes(N, C, V);
  gemm(blas, CUDA_R_16BF, false, false, C, N, V, wte, C, dlogits, V, 1.0f, dinp, C, CUDA_R_32F);  // dlogits @ wte
  gemm(blas, CUDA_R_16BF, false, true, C, V, N, inp, C, dlogits, V, 1.0f, dwte, C, CUDA_R_32F);   // dlogits^T @ inp
}

void bias_backward(float* dbias, const float* dout, int N, int OC, Blas& blas) {
  check_sizes(N, 0, OC);
  STRATA_CHECK_CUDA(detail::launch_add_column_sums(dbias, dout, N, OC, blas.stream()));
}

void lm_head_forward(float* logits, const float* inp, const float* wte, int N, int C, int V, Blas& blas) {
  check_sizes(N, C, V);
  gemm(blas, CUDA_R_32F, true, false, V, N, C, wte, C, inp, C, 0.0f, logits, V);  // logits = inp @ wte^T
}

void lm_head_backward(float* dinp, float* dwte, const float* dlogits, const float* inp, const float* wte, int N, int C,
                      int V, Blas& blas) {
  check_sizes(N, C, V);
  gemm(blas, CUDA_R_32F, false, false, C, N, V, wte, C, dlogits, V, 1.0f, dinp, C);  // dinp += dlogits @ wte
  gemm(blas, CUDA_R_32F, false, true, C, V, N, inp, C, dlogits, V, 1.0f, dwte, C);   // dwte += dlogits^T @ inp
}

}  // namespace strata::cuda
