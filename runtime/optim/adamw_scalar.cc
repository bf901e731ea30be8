// adamw_update_scalar: the plain loop, built without vectorisation (runtime/CMakeLists.txt).
#include <cmath>

#include "runtime/optim/adamw.h"

namespace strata {

void adamw_update_scalar(float* p, const float* g, float* m, float* v, std::size_t n, const AdamWConfig& cfg,
                         double lr, std::int64_t t, bool decay) {
  const float shrink = decay ? static_cast<float>(1.0 - lr * cfg.weight_decay) : 1.0f;
  const float b1 = static_cast<float>(cfg.beta1), ob1 = static_cast<float>(1.0 - cfg.beta1);
  const float b2 = static_cast<float>(cfg.beta2), ob2 = static_cast<float>(1.0 - cfg.beta2);
  const float step = static_cast<float>(lr / (1.0 - std::pow(cfg.beta1, static_cast<double>(t))));
  const float bc2 = static_cast<float>(std::sqrt(1.0 - std::pow(cfg.beta2, static_cast<double>(t))));
  const float eps = static_cast<float>(cfg.eps);
  for (std::size_t i = 0; i < n; ++i) {
    const float mi = b1 * m[i] + ob1 * g[i];
    const float vi = b2 * v[i] + ob2 * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * shrink - step * (mi / (std::sqrt(vi) / bc2 + eps));
  }
}

}  // namespace strata
