// shape_string: a tensor shape as text.
#include "core/shape_string.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace strata {

std::string shape_string(const std::vector<std::int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

}  // namespace strata
