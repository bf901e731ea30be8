// The linear layers and the LM head on the CPU, through blas.h's sgemm and gemm_bf16.
#include "kernels/cpu/matmul.h"

#include <cstddef>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/column_sums.h"
#include "kernels/cpu/vec_math.h"

namespace strata::cpu {

using detail::add_column_sums;
using detail::kMinParallelElements;

const char* blas_name() { return detail::blas_name(); }

namespace {

// The row-major product of blas.h, in f32 or with bf16 operands.
void gemm(bool bf16, bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
          float beta, float* C, int ldc) {
  if (bf16)
    detail::gemm_bf16(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
  else
    detail::sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC,
                    bool bf16) {
  if (N == 0 || OC == 0) return;
  float beta = 0.0f;
  if (bias != nullptr) {
    // out starts as the bias rows and the product is accumulated onto it (torch.addmm does the same).
#pragma omp parallel for schedule(static) if (static_cast <std::size_t>(N) * OC >= kMinParallelElements)
    for (int n = 0; n < N; ++n) std::copy(bias, bias + OC, out + static_cast<std::size_t>(n) * OC);
    beta = 1.0f;
  }
  gemm(bf16, false, false, N, OC, IC, inp, IC, weight, OC, beta, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC, bool bf16) {
  if (dinp != nullptr) gemm(bf16, false, true, N, IC, OC, dout, OC, weight, OC, 1.0f, dinp, IC);
  gemm(bf16, true, false, IC, OC, N, inp, IC, dout, OC, 1.0f, dweight, OC);
  if (dbias != nullptr)
    add_column_sums(dbias, N, OC,
                    [&](int n, int c) { return static_cast<double>(dout[static_cast<std::size_t>(n) * OC + c]); });
}

void round_to_bf16(float* out, const float* in, std::size_t n) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelElements)
  for (std::size_t i = 0; i < n; ++i) out[i] = detail::round_bf16(in[i]);
}

void lm_head_forward(float* logits, const float* inp, const float* wte, int N, int C, int V, bool bf16) {
  gemm(bf16, false, true, N, V, C, inp, C, wte, C, 0.0f, logits, V);
}

void lm_head_backward(float* dinp, float* dwte, const float* dlogits, const float* inp, const float* wte, int N, int C,
                      int V, bool bf16) {
  gemm(bf16, false, false, N, C, V, dlogits, V, wte, C, 1.0f, dinp, C);
  gemm(bf16, true, false, V, C, N, dlogits, V, inp, C, 1.0f, dwte, C);
}

const char* bf16_gemm_name() { return detail::bf16_gemm_name(); }

}  // namespace strata::cpu
