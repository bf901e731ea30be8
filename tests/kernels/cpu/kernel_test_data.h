// What the CPU kernel tests share: normal random inputs from a seed, and a thread count held for one scope.
#pragma once

#include <omp.h>

#include <cstddef>
#include <random>
#include <vector>

namespace strata::test {

// n floats ~ Normal(mean, stddev) from std::mt19937(seed): the same values on every machine with this libstdc++.
inline std::vector<float> randn(std::size_t n, unsigned seed, float stddev = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Sets the OpenMP thread count for one scope.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedThreads() { omp_set_num_threads(saved_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int saved_;
};

}  // namespace strata::test
