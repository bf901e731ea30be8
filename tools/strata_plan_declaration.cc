// strata-plan --declaration: reads a step declaration, prints predict_step_memory's categories and declaration_table.
#include "tools/strata_plan_declaration.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "core/tool_main.h"
#include "runtime/memory/step_declaration_file.h"
#include "tools/strata_plan_inference.h"

namespace {

nlohmann::json categories_json(const strata::CategoryBytes& b) {
  nlohmann::json j = nlohmann::json::object();
  for (std::size_t i = 0; i < strata::kNumMemCategories; ++i)
    if (b[i] > 0) j[strata::mem_category_name(static_cast<strata::MemCategory>(i))] = b[i];
  j["total"] = strata::total(b);
  return j;
}

std::string categories_text(const strata::CategoryBytes& b) {
  std::string out;
  for (std::size_t i = 0; i < strata::kNumMemCategories; ++i)
    if (b[i] > 0)
      out += fmt::format("  {:<18} {:>16}\n", strata::mem_category_name(static_cast<strata::MemCategory>(i)), b[i]);
  return out + fmt::format("  {:<18} {:>16}\n", "total", strata::total(b));
}

}  // namespace

int strata_plan_declaration(int argc, char** argv) {
  CLI::App app{"strata-plan --declaration: one rank's step memory from its trainer's declaration"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string path, device_memory;
  bool json = false;
  app.add_option("--declaration", path,
                 "a step declaration (format strata-step-declaration, as custom_trainer "
                 "--declaration-out writes one)")
      ->required();
  app.add_option("--device-memory", device_memory, "memory per device, e.g. 80GB: say whether the step fits");
  app.add_flag("--json", json, "print the prediction as JSON");
  CLI11_PARSE(app, argc, argv);
  return strata::run_tool("strata-plan", [&]() -> int {
    const strata::StepDeclaration d = strata::read_step_declaration(path);
    const double budget = device_memory.empty() ? 0 : data_sheet_bytes(device_memory, "--device-memory");
    const strata::CategoryBytes device = strata::predict_step_memory(d), host = strata::predict_step_host_memory(d);
    const bool fits = budget <= 0 || static_cast<double>(strata::total(device)) <= budget;
    std::size_t elements = 0;
    for (const strata::UnitSpec& u : d.units)
      for (const strata::SlotSpec& s : u.slots) elements += strata::shape_numel(s.shape);
    if (json) {
      nlohmann::json out = {{"declaration", path},
                            {"units", d.units.size()},
                            {"parameters", elements},
                            {"device", categories_json(device)},
                            {"host", categories_json(host)}};
      if (budget > 0) {
        out["device_memory"] = budget;
        out["fits"] = fits;
      }
      std::printf("%s\n", out.dump(1).c_str());
    } else {
      std::printf("declaration: %s: %zu units, %zu parameters (this rank's), %s, dp %d (replicas %d)\n\n", path.c_str(),
                  d.units.size(), elements, d.sharding.describe().c_str(), d.groups.dp(), d.groups.replicate);
      std::printf("what the step holds:\n%s\n", strata::declaration_table(d).c_str());
      std::printf("device, per category (bytes):\n%s", categories_text(device).c_str());
      if (strata::total(host) > 0) std::printf("host, per category (bytes):\n%s", categories_text(host).c_str());
      if (budget > 0) std::printf("\ndevice memory %.1f GB: %s\n", budget / 1e9, fits ? "FITS" : "DOES NOT FIT");
    }
    return plan_written(fits ? 0 : 2);
  });
}
