// shape_string: a tensor shape as text, "[3, 4]" (errors and listings name shapes this way).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

std::string shape_string(const std::vector<std::int64_t>& shape);

}  // namespace strata
