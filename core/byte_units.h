// Byte counts as people read them: MiB as a number for tables and log lines, and a size in words for errors.
#pragma once

#include <cstdint>
#include <string>

namespace strata {

// Bytes in MiB (2^20), for "{:.1f} MiB".
constexpr double mib(double bytes) { return bytes / (1024.0 * 1024.0); }
// "100.0 GiB (107374182400 bytes)"; "512 bytes" below 1 KiB.
std::string bytes_text(std::uint64_t bytes);

}  // namespace strata
