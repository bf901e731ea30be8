// bytes_text: the largest binary unit the size reaches, with the exact count beside it.
#include "core/byte_units.h"

#include <fmt/format.h>

namespace strata {

std::string bytes_text(std::uint64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} bytes", bytes);
  return fmt::format("{:.1f} {} ({} bytes)", v, units[u], bytes);
}

}  // namespace strata
