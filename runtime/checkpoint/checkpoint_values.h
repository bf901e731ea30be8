// The ranges a checkpoint's values must lie in, beyond their checksums: a block can be written with valid checksums
// and hold NaN (a run that diverged, a bug, an edited file). Every tensor's values are finite, and a second moment
// (exp_avg_sq/...) is a running mean of squares, never negative. Load, strata-ckpt verify and export all check them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

// The first of values[0, n) outside the range of `tensor` (its name says its kind: "exp_avg_sq/..."), or n.
std::size_t first_bad_value(const std::string& tensor, const float* values, std::size_t n);
// "tensor 'exp_avg_sq/w' holds -0.5 at element 17 (a second moment is a mean of squares, never negative)".
std::string describe_bad_value(const std::string& tensor, std::uint64_t element, float value);

}  // namespace strata
