// Counter-based randomness for initialisers: the splitmix64 finaliser and FNV-1a string hashing, so any rank can
// produce element k of any tensor without shared generator state.
#pragma once

#include <cstdint>
#include <string>

namespace strata {

// splitmix64's output for state x (one increment, then the finaliser).
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace strata
