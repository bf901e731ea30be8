// Elementwise kernels on the CPU: the tanh GELU and the residual sum.
// Conventions as every kernel of kernels/cpu (kernels/README.md): forward kernels overwrite their outputs, backward
// kernels add (+=) into every gradient; row counts may be 0.
#pragma once

#include <cstddef>

namespace strata::cpu {

// gelu_tanh(z) = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))), elementwise, evaluated as z / (1 + exp(-2u))
// with u the tanh argument (the same function, without the cancellation in 1 + tanh for negative z). out may
// equal inp.
void gelu_forward(float* out, const float* inp, std::size_t n);
// dinp += gelu_tanh'(inp) * dout.
void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n);

// out = a + b, elementwise. out may equal a or b.
void residual_forward(float* out, const float* a, const float* b, std::size_t n);

}  // namespace strata::cpu
