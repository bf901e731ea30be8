// The distances every comparison in tests/ is made with. Each is infinite when any value it reads is not finite
// (NaN or infinity, on either side) or when the two sides differ in length, so a run that went NaN can never pass
// a bar: a running std::max(worst, d) keeps `worst` when d is NaN, and `d > worst` is false for NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace strata::test {

inline constexpr double kFar = std::numeric_limits<double>::infinity();

// The larger of two distances; infinite when either is NaN.
inline double worse(double a, double b) { return std::isnan(a) || std::isnan(b) ? kFar : std::max(a, b); }

// |got - want|; infinite when either is not finite.
inline double abs_diff(double got, double want) {
  return std::isfinite(got) && std::isfinite(want) ? std::fabs(got - want) : kFar;
}

// |got - want| / max(|want|, floor); infinite when either is not finite.
inline double rel_diff(double got, double want, double floor = 1e-30) {
  const double d = abs_diff(got, want);
  return d == kFar ? kFar : d / std::max(std::fabs(want), floor);
}

// Ranges are anything with size() and operator[] convertible to double (std::vector, std::span, std::array).

// max_i |got_i - want_i| / max(|want_i|, floor).
template <typename Got, typename Want>
double max_rel(const Got& got, const Want& want, double floor = 1e-30) {
  if (got.size() != want.size()) return kFar;
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    worst = worse(worst, rel_diff(static_cast<double>(got[i]), static_cast<double>(want[i]), floor));
  return worst;
}

// max_i |got_i - want_i|.
template <typename Got, typename Want>
double max_abs(const Got& got, const Want& want) {
  if (got.size() != want.size()) return kFar;
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    worst = worse(worst, abs_diff(static_cast<double>(got[i]), static_cast<double>(want[i])));
  return worst;
}

// max_i |got_i - want_i| / max(floor, max_i |want_i|): the error relative to the tensor's scale.
template <typename Got, typename Want>
double max_abs_over_scale(const Got& got, const Want& want, double floor = 1e-30) {
  const double diff = max_abs(got, want);
  if (diff == kFar) return kFar;  // want's scale is finite from here on
  double scale = floor;
  for (std::size_t i = 0; i < want.size(); ++i) scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  return diff / scale;
}

// sqrt(mean_i ((got_i - want_i) / want_i)^2); 0 for two empty ranges.
template <typename Got, typename Want>
double rms_rel(const Got& got, const Want& want) {
  if (got.size() != want.size()) return kFar;
  double sum = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    sum += std::pow(rel_diff(static_cast<double>(got[i]), static_cast<double>(want[i])), 2);
  return want.size() == 0 ? 0.0 : std::sqrt(sum / static_cast<double>(want.size()));
}

}  // namespace strata::test
