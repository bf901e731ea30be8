// The SwiGLU gate of a gated MLP (Llama's down(silu(gate(x)) * up(x))) on the CPU: the f32 reference of
// kernels/cuda's swiglu. Conventions as every kernel of kernels/cpu (kernels/README.md).
#pragma once

namespace strata::cpu {

// gu[N, 2F] holds each row's gate product in columns 0 .. F-1 and its up product in F .. 2F-1 (the fused
// column-parallel gate|up product; under tensor parallelism F is this rank's share). out[N, F] = silu(g) * u with
// silu(g) = g / (1 + exp(-g)), evaluated from exp(-|g|) so that no g overflows it (g = -100 gives a finite, tiny
// result, never NaN). out may not alias gu.
void swiglu_forward(float* out, const float* gu, int N, int F);
// dgu[:, 0..F) += dout * u * silu'(g), dgu[:, F..2F) += dout * silu(g), with
// silu'(g) = s (1 + g (1 - s)), s = 1 / (1 + exp(-g)).
void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int F);

}  // namespace strata::cpu
