// Checkpoint values: the range of each kind of tensor, and how a value outside it is named.
#include "runtime/checkpoint/checkpoint_values.h"

#include <fmt/format.h>

#include <cmath>

namespace strata {
namespace {

bool second_moment(const std::string& tensor) { return tensor.rfind("exp_avg_sq/", 0) == 0; }

std::string value_text(float v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:g}", v);
}

}  // namespace

std::size_t first_bad_value(const std::string& tensor, const float* values, std::size_t n) {
  if (second_moment(tensor)) {
    for (std::size_t i = 0; i < n; ++i)
      if (!(values[i] >= 0) || std::isinf(values[i])) return i;  // NaN fails the comparison
    return n;
  }
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(values[i])) return i;
  return n;
}

std::string describe_bad_value(const std::string& tensor, std::uint64_t element, float value) {
  const char* why = !std::isfinite(value)   ? "values must be finite"
                    : second_moment(tensor) ? "a second moment is a mean of squares, never negative"
                                            : "out of range";
  return fmt::format("tensor '{}' holds {} at element {} ({})", tensor, value_text(value), element, why);
}

}  // namespace strata
