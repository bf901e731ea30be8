// Matrix products on the CPU through oneDNN: the linear layers and the tied LM head, in f32 or with bf16
// operands.
// Conventions as every kernel of kernels/cpu (kernels/README.md): forward kernels overwrite their outputs, backward
// kernels add (+=) into every gradient; row counts may be 0.
#pragma once

#include <cstddef>

namespace strata::cpu {

// The sgemm the matmuls use, e.g. "oneDNN 2.6.3 dnnl_sgemm (avx2, openmp)".
const char* blas_name();

// bf16_products (the matmuls and the LM head): every operand of each product rounded to bf16 and the sums in f32
// (blas.h's gemm_bf16); outputs, gradients and the bias terms stay f32 (dbias sums the f32 dout).

// out[N,OC] = inp[N,IC] @ weight[IC,OC] (+ bias[OC] when bias is non-null). Conv1D layout: weight is [in, out].
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC,
                    bool bf16_products = false);
// dinp += dout @ weight^T (skipped when dinp is null), dweight += inp^T @ dout, dbias += column sums of dout
// (skipped when dbias is null).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC, bool bf16_products = false);

// out[i] = in[i] rounded to the nearest bf16 (ties to even, NaN stays NaN), kept as a float. out may equal in.
void round_to_bf16(float* out, const float* in, std::size_t n);

// Tied lm head: logits[N,V] = inp[N,C] @ wte[V,C]^T.
void lm_head_forward(float* logits, const float* inp, const float* wte, int N, int C, int V,
                     bool bf16_products = false);
// dinp += dlogits @ wte, dwte += dlogits^T @ inp.
void lm_head_backward(float* dinp, float* dwte, const float* dlogits, const float* inp, const float* wte, int N, int C,
                      int V, bool bf16_products = false);
// What the bf16 products run on here, e.g. "oneDNN bf16 matmul (brg:avx512_core_amx_bf16)".
const char* bf16_gemm_name();

}  // namespace strata::cpu
