// Rotary position embeddings (RoPE) as Hugging Face's Llama applies them (rotate_half: channel i of a head pairs
// with channel i + D/2), with the `llama3` frequency scaling of Llama 3.1 and later. The f32 reference of
// kernels/cuda's rope. Conventions as every kernel of kernels/cpu (kernels/README.md).
#pragma once

#include <cstddef>

namespace strata::cpu {

// The `rope_scaling` of a config.json with rope_type "llama3" (kind kLlama3), or none (kNone: plain RoPE).
struct RopeScaling {
  enum Kind { kNone, kLlama3 };
  Kind kind = kNone;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

// The D/2 inverse frequencies of a head of D channels (D even): inv_freq[i] = theta^(-2i/D), then, under kLlama3,
// Hugging Face's _compute_llama3_parameters: wavelength w = 2 pi / inv_freq; w > original / low_freq_factor divides
// it by factor; w < original / high_freq_factor keeps it; between, it is smoothed by
// s = (original / w - low_freq_factor) / (high_freq_factor - low_freq_factor): (1 - s) inv / factor + s inv.
// Computed in double.
void rope_inv_freq(double* inv_freq, int D, double theta, const RopeScaling& scaling);

// The rotation table of positions 0 .. positions-1: cos[p * D/2 + i] = cos(p * inv_freq[i]) and sin likewise,
// each angle formed in double and its cosine and sine rounded once to f32. cos and sin hold positions * D/2 floats.
// (Hugging Face forms the angles in f32, so its table differs from this one by up to an f32 step of the angle:
// ~1e-3 at position 10^4 for the fastest frequencies.)
void rope_table(float* cos, float* sin, int positions, int D, double theta, const RopeScaling& scaling);

// Rotates `heads` heads of D channels, in place, in each of B x T rows of x: row (b, t) starts at
// x + b * batch_stride + t * row_stride (in floats), head h at column h * D; row t is at position pos0 + t, whose
// table row must exist. For i < D/2, with c = cos[p][i], s = sin[p][i]:
//   x'[i] = x[i] c - x[i + D/2] s,   x'[i + D/2] = x[i + D/2] c + x[i] s.
// B, T and heads may be 0. Rows may not overlap (checked as row_stride >= heads * D when T > 1 and batch_stride >=
// heads * D when B > 1). Columns outside the heads are not touched, so q and k rotate inside a packed qkv row.
void rope_forward(float* x, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                  std::size_t row_stride, std::size_t batch_stride);
// The transpose of rope_forward's rotation, in place: turns d(rotated) into d(unrotated) (the rotation is
// orthogonal, so this is rope_forward with sin negated). Not an accumulation: the gradient is rotated where it is.
void rope_backward(float* dx, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                   std::size_t row_stride, std::size_t batch_stride);

}  // namespace strata::cpu
