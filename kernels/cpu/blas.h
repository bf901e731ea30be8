// The one row-major sgemm the GPT-2 kernels call, bound at build time to the BLAS in docs/notes/cpu-blas.md.
#pragma once

namespace strata::cpu::detail {

// C[M,N] = op(A)[M,K] @ op(B)[K,N] + beta * C, row-major; op transposes when trans_* is set, so A is stored
// [M,K] (lda >= K) or [K,M] (lda >= M), B [K,N] (ldb >= N) or [N,K] (ldb >= K). Sizes may be 0.
// Called from outside any OpenMP parallel region; the BLAS threads itself.
void sgemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
           float beta, float* C, int ldc);

// The same product with every element of op(A) and op(B) rounded to bf16 first and the sums in f32 (blas_bf16.cc);
// beta is 0 or 1.
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
               float beta, float* C, int ldc);

void blas_set_num_threads(int n);
const char* blas_name();
// What gemm_bf16 runs on, e.g. "oneDNN bf16 matmul (brg:avx512_core_amx_bf16)".
const char* bf16_gemm_name();

}  // namespace strata::cpu::detail
