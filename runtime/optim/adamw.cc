// adamw_update and LrSchedule.
#include "runtime/optim/adamw.h"

#include <cmath>

#include "runtime/core/error.h"

namespace strata {

void AdamWConfig::validate() const {
  STRATA_CHECK(lr >= 0, "learning rate {} is negative", lr);
  STRATA_CHECK(beta1 >= 0 && beta1 < 1, "beta1 {} is outside [0, 1)", beta1);
  STRATA_CHECK(beta2 >= 0 && beta2 < 1, "beta2 {} is outside [0, 1)", beta2);
  STRATA_CHECK(eps > 0, "eps {} must be positive", eps);
  STRATA_CHECK(weight_decay >= 0, "weight decay {} is negative", weight_decay);
}

void adamw_update(float* p, const float* g, float* m, float* v, std::size_t n, const AdamWConfig& cfg, double lr,
                  std::int64_t t, bool decay) {
  const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(t));
  const float shrink = decay ? static_cast<float>(1.0 - lr * cfg.weight_decay) : 1.0f;
  const float b1 = static_cast<float>(cfg.beta1), one_minus_b1 = static_cast<float>(1.0 - cfg.beta1);
  const float b2 = static_cast<float>(cfg.beta2), one_minus_b2 = static_cast<float>(1.0 - cfg.beta2);
  const float step_size = static_cast<float>(lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(cfg.eps);
  for (std::size_t i = 0; i < n; ++i) {
    float gi = g[i];
    float pi = p[i] * shrink;
    float mi = b1 * m[i] + one_minus_b1 * gi;
    float vi = b2 * v[i] + one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * (mi / (std::sqrt(vi) / bc2_sqrt + eps));
  }
}

double LrSchedule::at(std::int64_t step) const {
  if (warmup_steps > 0 && step < warmup_steps)
    return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (total_steps <= warmup_steps) return max_lr;
  if (step >= total_steps) return min_lr;
  double progress = static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace strata
