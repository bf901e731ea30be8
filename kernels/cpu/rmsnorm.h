// RMSNorm on the CPU (Llama's LlamaRMSNorm): the f32 reference of kernels/cuda's rmsnorm.
// Conventions as every kernel of kernels/cpu (kernels/README.md): forward kernels overwrite their outputs, backward
// kernels add (+=) into every gradient; N rows of C channels; N may be 0.
#pragma once

namespace strata::cpu {

// Per row x of inp[N, C]: rstd = 1 / sqrt(mean(x^2) + eps), out = x * rstd * weight (elementwise over C). The mean
// of squares sums in double; rstd[N] is saved for the backward. out may not alias inp. C >= 1 and eps >= 0 (checked).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps);
// With xhat = x * rstd and g = dout * weight: dinp += rstd * (g - xhat * mean(g * xhat)) per row;
// dweight[c] += the sum over rows of dout[n, c] * xhat[n, c], summed over rows in order in double.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C);

}  // namespace strata::cpu
