// fuzz_step_declaration: libFuzzer entry point for parse_step_declaration (strata-plan --declaration), and what an
// accepted declaration leads to: its prediction and its table compute (or refuse with strata::Error) without a crash
// or undefined behaviour, and it writes back to a document that parses to the same prediction.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "runtime/memory/step_declaration_file.h"

namespace {

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_step_declaration: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  strata::StepDeclaration d;
  try {
    d = strata::parse_step_declaration(text, "fuzz-input");
  } catch (const strata::Error&) {
    return 0;  // refused, as it should be; any other exception or a crash is a finding
  }
  strata::CategoryBytes device{}, host{};
  try {
    device = strata::predict_step_memory(d);
    host = strata::predict_step_host_memory(d);
    (void)strata::declaration_table(d);
  } catch (const strata::Error&) {
    return 0;  // a layout the prediction refuses by name
  }
  try {
    const strata::StepDeclaration back = strata::parse_step_declaration(strata::step_declaration_json(d), "written");
    if (strata::predict_step_memory(back) != device || strata::predict_step_host_memory(back) != host)
      finding("a declaration written back predicts other bytes", text);
  } catch (const strata::Error& e) {
    finding("a declaration written back is refused", e.what());
  }
  return 0;
}
