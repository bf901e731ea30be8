// adamw_update and LrSchedule.
#include "runtime/optim/adamw.h"

#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "core/error.h"

namespace strata {

void AdamWConfig::validate() const {
  STRATA_CHECK(lr >= 0, "learning rate {} is negative", lr);
  STRATA_CHECK(beta1 >= 0 && beta1 < 1, "beta1 {} is outside [0, 1)", beta1);
  STRATA_CHECK(beta2 >= 0 && beta2 < 1, "beta2 {} is outside [0, 1)", beta2);
  STRATA_CHECK(eps > 0, "eps {} must be positive", eps);
  STRATA_CHECK(weight_decay >= 0, "weight decay {} is negative", weight_decay);
}

namespace {

// One chunk, written for the vectorizer: no aliasing between the four arrays, no branches. Compiled for AVX-512,
// AVX2 and the baseline, picked at load time (target_clones). Every operation (multiply, add, divide, sqrt) rounds
// exactly as IEEE says at any vector width, and this file is built with -ffp-contract=off, so each lane computes
// bit for bit what the plain scalar loop computes: thread count and vector width never change a result. Returns the
// number of non-finite results: |x| <= FLT_MAX is false for NaN and both infinities, and vectorises as a compare.
__attribute__((target_clones("avx512f", "avx2", "default"))) std::size_t adamw_chunk(
    float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, std::size_t n,
    const AdamWScalars k) {
  std::size_t bad = 0;
#pragma omp simd reduction(+ : bad)
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = k.b1 * m[i] + k.one_minus_b1 * gi;
    const float vi = k.b2 * v[i] + k.one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * k.shrink - k.step_size * (mi / (std::sqrt(vi) / k.bc2_sqrt + k.eps));
    p[i] = pi;
    bad += std::fabs(pi) <= FLT_MAX ? 0 : 1;
  }
  return bad;
}

// Below this many elements a call stays on the calling thread (a parallel region costs a few microseconds).
constexpr std::size_t kParallelMin = 1 << 15;
// Chunks are whole cache lines of every array, so threads never share a line.
constexpr std::size_t kChunkAlign = 16;

}  // namespace

AdamWScalars adamw_scalars(const AdamWConfig& cfg, double lr, std::int64_t t, bool decay) {
  const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(t));
  return AdamWScalars{decay ? static_cast<float>(1.0 - lr * cfg.weight_decay) : 1.0f,
                      static_cast<float>(cfg.beta1),
                      static_cast<float>(1.0 - cfg.beta1),
                      static_cast<float>(cfg.beta2),
                      static_cast<float>(1.0 - cfg.beta2),
                      static_cast<float>(lr / bc1),
                      static_cast<float>(std::sqrt(bc2)),
                      static_cast<float>(cfg.eps)};
}

std::size_t adamw_update(float* p, const float* g, float* m, float* v, std::size_t n, const AdamWConfig& cfg,
                         double lr, std::int64_t t, bool decay) {
  const AdamWScalars k = adamw_scalars(cfg, lr, t, decay);
  // omp_get_max_threads() ignores OMP_THREAD_LIMIT (libgomp): ask for no more threads than the region can get.
  const int threads = n < kParallelMin ? 1 : std::min(omp_get_max_threads(), omp_get_thread_limit());
  if (threads <= 1) return adamw_chunk(p, g, m, v, n, k);
  const std::size_t per = (n / static_cast<std::size_t>(threads) + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
  std::size_t bad = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : bad)
  for (int c = 0; c < threads; ++c) {
    const std::size_t begin = std::min(n, static_cast<std::size_t>(c) * per);
    const std::size_t end = std::min(n, begin + per);
    bad += adamw_chunk(p + begin, g + begin, m + begin, v + begin, end - begin, k);
  }
  return bad;
}

const char* lr_decay_name(LrDecay decay) {
  switch (decay) {
    case LrDecay::kConstant: return "constant";
    case LrDecay::kCosine: return "cosine";
    case LrDecay::kLinear: return "linear";
    case LrDecay::kWsd: return "wsd";
  }
  return "?";
}

LrDecay parse_lr_decay(const std::string& name) {
  for (LrDecay d : {LrDecay::kConstant, LrDecay::kCosine, LrDecay::kLinear, LrDecay::kWsd})
    if (name == lr_decay_name(d)) return d;
  STRATA_THROW(ErrorCode::kInvalidArgument, "--lr-schedule '{}': expected constant, cosine, linear or wsd", name);
}

double LrSchedule::at(std::int64_t step) const {
  if (warmup_steps > 0 && step < warmup_steps)
    return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (decay == LrDecay::kConstant || total_steps <= warmup_steps) return max_lr;
  if (step >= total_steps) return min_lr;
  const double span = static_cast<double>(total_steps - warmup_steps);
  double progress = static_cast<double>(step - warmup_steps) / span;
  switch (decay) {
    case LrDecay::kCosine: return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(M_PI * progress));
    case LrDecay::kLinear: return max_lr - (max_lr - min_lr) * progress;
    case LrDecay::kWsd: {
      // The decay's steps: the fraction of the span, rounded, at least one; the stable phase before them.
      const double decaying = std::max(1.0, std::round(decay_fraction * span));
      const double into = static_cast<double>(step) - (static_cast<double>(total_steps) - decaying);
      if (into < 0) return max_lr;
      return max_lr - (max_lr - min_lr) * into / decaying;
    }
    case LrDecay::kConstant: break;
  }
  return max_lr;
}

void LrSchedule::validate() const {
  STRATA_CHECK(max_lr >= 0 && std::isfinite(max_lr), "--lr {} must be finite and >= 0", max_lr);
  STRATA_CHECK(min_lr >= 0 && min_lr <= max_lr, "--min-lr {} must be in [0, --lr {}]", min_lr, max_lr);
  STRATA_CHECK(warmup_steps >= 0 && total_steps >= 0, "--warmup {} and the schedule's {} steps must be >= 0",
               warmup_steps, total_steps);
  STRATA_CHECK(decay_fraction > 0 && decay_fraction <= 1, "--decay-fraction {} must be in (0, 1]", decay_fraction);
}

}  // namespace strata
