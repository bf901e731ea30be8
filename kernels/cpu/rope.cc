// Rotary position embeddings on the CPU: Llama 3's scaled inverse frequencies, the cos/sin table, the rotation.
#include "kernels/cpu/rope.h"

#include <cmath>
#include <cstddef>
#include <numbers>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/column_sums.h"

namespace strata::cpu {
namespace {

void check_head_dim(int D) {
  STRATA_CHECK(D >= 2 && D % 2 == 0, "rope head dimension D = {} must be even and >= 2", D);
}

// Hugging Face's _compute_llama3_parameters, applied to one inverse frequency. Its three bands meet continuously:
// s is 0 at w = low wavelength (inv / factor) and 1 at w = high wavelength (inv).
double llama3_scaled(double inv, const RopeScaling& sc) {
  const double original = sc.original_max_position_embeddings;
  const double low_freq_wavelen = original / sc.low_freq_factor;
  const double high_freq_wavelen = original / sc.high_freq_factor;
  const double wavelen = 2.0 * std::numbers::pi / inv;
  if (wavelen < high_freq_wavelen) return inv;
  if (wavelen > low_freq_wavelen) return inv / sc.factor;
  const double s = (original / wavelen - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor);
  return (1.0 - s) * inv / sc.factor + s * inv;
}

// x'[i] = x[i] c - x[i + D/2] s, x'[i + D/2] = x[i + D/2] c + x[i] s over every head of every row; the inverse
// rotation is the same with s negated (exactly: negation does not round).
template <bool kInverse>
void rotate(float* x, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
            std::size_t row_stride, std::size_t batch_stride) {
  STRATA_CHECK(B >= 0 && T >= 0 && heads >= 0, "rope of B = {}, T = {}, heads = {} (each must be >= 0)", B, T, heads);
  check_head_dim(D);
  STRATA_CHECK(pos0 >= 0, "rope start position pos0 = {} must be >= 0", pos0);
  if (B == 0 || T == 0 || heads == 0) return;
  const std::size_t width = static_cast<std::size_t>(heads) * D;
  STRATA_CHECK(T <= 1 || row_stride >= width, "rope rows overlap: row_stride {} < heads * D = {}", row_stride, width);
  STRATA_CHECK(B <= 1 || batch_stride >= width, "rope rows overlap: batch_stride {} < heads * D = {}", batch_stride,
               width);
  const int half = D / 2;
  const std::size_t elements = static_cast<std::size_t>(B) * T * width;
#pragma omp parallel for collapse(2) schedule(static) if (elements >= detail::kMinParallelElements)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      float* row = x + b * batch_stride + t * row_stride;
      const std::size_t p = static_cast<std::size_t>(pos0) + t;
      const float* c = cos + p * half;
      const float* s = sin + p * half;
      for (int h = 0; h < heads; ++h) {
        float* lo = row + static_cast<std::size_t>(h) * D;
        float* hi = lo + half;
        for (int i = 0; i < half; ++i) {
          const float si = kInverse ? -s[i] : s[i];
          const float x0 = lo[i], x1 = hi[i];
          lo[i] = x0 * c[i] - x1 * si;
          hi[i] = x1 * c[i] + x0 * si;
        }
      }
    }
}

}  // namespace

void rope_inv_freq(double* inv_freq, int D, double theta, const RopeScaling& scaling) {
  check_head_dim(D);
  STRATA_CHECK(theta > 0.0, "rope theta {} must be > 0", theta);
  if (scaling.kind == RopeScaling::kLlama3) {
    STRATA_CHECK(scaling.factor > 0 && scaling.low_freq_factor > 0 &&
                     scaling.high_freq_factor > scaling.low_freq_factor && scaling.original_max_position_embeddings > 0,
                 "llama3 rope_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                 "original_max_position_embeddings > 0; got factor {}, low_freq_factor {}, high_freq_factor {}, "
                 "original_max_position_embeddings {}",
                 scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor,
                 scaling.original_max_position_embeddings);
  } else {
    STRATA_CHECK(scaling.kind == RopeScaling::kNone, "unknown rope scaling kind {}", static_cast<int>(scaling.kind));
  }
  for (int i = 0; i < D / 2; ++i) {
    const double inv = 1.0 / std::pow(theta, static_cast<double>(2 * i) / D);  // HF: 1 / base^(arange(0, D, 2) / D)
    inv_freq[i] = scaling.kind == RopeScaling::kLlama3 ? llama3_scaled(inv, scaling) : inv;
  }
}

void rope_table(float* cos, float* sin, int positions, int D, double theta, const RopeScaling& scaling) {
  STRATA_CHECK(positions >= 0, "rope table of {} positions (must be >= 0)", positions);
  check_head_dim(D);
  const int half = D / 2;
  std::vector<double> inv_freq(half);
  rope_inv_freq(inv_freq.data(), D, theta, scaling);
#pragma omp parallel for schedule(static)
  for (int p = 0; p < positions; ++p)
    for (int i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv_freq[i];
      const std::size_t k = static_cast<std::size_t>(p) * half + i;
      cos[k] = static_cast<float>(std::cos(angle));
      sin[k] = static_cast<float>(std::sin(angle));
    }
}

void rope_forward(float* x, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                  std::size_t row_stride, std::size_t batch_stride) {
  rotate<false>(x, cos, sin, B, T, heads, D, pos0, row_stride, batch_stride);
}

void rope_backward(float* dx, const float* cos, const float* sin, int B, int T, int heads, int D, int pos0,
                   std::size_t row_stride, std::size_t batch_stride) {
  rotate<true>(dx, cos, sin, B, T, heads, D, pos0, row_stride, batch_stride);
}

}  // namespace strata::cpu
