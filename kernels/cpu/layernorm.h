// LayerNorm (GPT-2's, eps 1e-5) on the CPU.
// Conventions as every kernel of kernels/cpu (kernels/README.md): forward kernels overwrite their outputs, backward
// kernels add (+=) into every gradient; row counts may be 0.
#pragma once


namespace strata::cpu {

// Per row of inp[N,C]: out = (x - mean) * rstd * weight + bias with rstd = 1/sqrt(biased var + 1e-5);
// mean[N] and rstd[N] are saved for the backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C);

}  // namespace strata::cpu
