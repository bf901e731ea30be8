// fuzz_cluster_file: libFuzzer entry point for parse_cluster (strata-plan --simulate --cluster), and a check of what it
// accepts: every field in the range its schema and ClusterSpec::validate give.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "runtime/memory/step_simulator.h"

namespace {

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_cluster_file: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  strata::ClusterSpec c;
  try {
    c = strata::parse_cluster(text, "fuzz-input");
  } catch (const strata::Error&) {
    return 0;  // refused, as it should be; any other exception or a crash is a finding
  }
  if (c.devices_per_node < 1 || !(c.peak_tflops > 0) || !std::isfinite(c.peak_tflops) || !(c.gemm_efficiency > 0) ||
      c.gemm_efficiency > 1 || !(c.hbm_bytes > 0) || !std::isfinite(c.hbm_bytes) || c.cores < 0 ||
      !(c.intra.bandwidth_gbs > 0) || !(c.inter.bandwidth_gbs > 0) || !(c.intra.latency_us >= 0))
    finding("an accepted cluster file has a value out of range", text);
  try {
    c.validate();
  } catch (const strata::Error& e) {
    finding("an accepted cluster file fails validate()", e.what());
  }
  return 0;
}
