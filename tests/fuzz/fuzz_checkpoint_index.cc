// fuzz_checkpoint_index: libFuzzer entry point for CheckpointIndex::parse, and a round trip of what it accepts.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "runtime/checkpoint/checkpoint_index.h"

namespace {

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_checkpoint_index: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  strata::CheckpointIndex index;
  try {
    index = strata::CheckpointIndex::parse(text, "fuzz-input");
  } catch (const strata::Error&) {
    return 0;  // refused, as it should be; any other exception or a crash is a finding
  }
  (void)index.coverage_problem();
  // An accepted index serializes to text that parses again, to the same index (compared through its text), and
  // declares the model it holds.
  const std::string serialized = index.serialize();
  try {
    const strata::CheckpointIndex again = strata::CheckpointIndex::parse(serialized, "fuzz-input (serialized)");
    if (again.serialize() != serialized) finding("the round trip changed the index", serialized);
    again.check_model(index.units, "fuzz-input");
  } catch (const strata::Error& e) {
    finding("an accepted index, serialized, is refused", e.what());
  }
  return 0;
}
