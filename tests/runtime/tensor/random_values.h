// Deterministic test values for the tensor-parallel tests: uniform in [-scale, scale), optionally bf16-representable
// (rounded to bf16 and kept as f32, exactly), so an f32 and a bf16 run start from the same numbers.
#pragma once

#include <random>
#include <vector>

#include "core/dtype.h"

namespace strata::test {

inline std::vector<float> uniform_values(std::size_t n, unsigned seed, float scale, bool bf16_representable) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_representable ? Bf16::from(u(gen)).value() : u(gen);
  return v;
}

}  // namespace strata::test
