// The GPT-2 embedding (token plus learned position) on the CPU.
// Conventions as every kernel of kernels/cpu (kernels/README.md): forward kernels overwrite their outputs, backward
// kernels add (+=) into every gradient; row counts may be 0.
#pragma once

#include <cstdint>

namespace strata::cpu {

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]. Every token must be in [0, V).
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C);
// dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += sum over b of dout[b,t,:].
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C);

}  // namespace strata::cpu
