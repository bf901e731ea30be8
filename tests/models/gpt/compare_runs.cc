// compare_runs: holds a train_gpt run against a reference run (tp_runs.cmake). Usage:
//   compare_runs <loss tol> <norm tol> <param tol> <ref metrics> <got metrics> [<ref weights> <got weights>]
// Metrics are train_gpt --metrics files (one JSON record per step); weights are --save files. Losses and gradient
// norms are compared step by step (relative), parameters tensor by tensor: ||a - b|| / ||a|| (Frobenius), the key
// third of each attn.c_attn.bias apart (see below): its RMS difference within 1e-4. Prints the worst of each and exits
// 1 when one is over its tolerance or the runs differ in steps or tensors.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "tests/support/compare.h"

namespace {

std::vector<nlohmann::json> read_metrics(const char* path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "compare_runs: cannot read %s\n", path);
    std::exit(2);
  }
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// A metric as a number: NaN where train_gpt wrote a non-finite value (JSON has none: it writes null).
double number(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  return it != record.end() && it->is_number() ? it->get<double>() : std::nan("");
}

using strata::test::rel_diff;
using strata::test::worse;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6 && argc != 8) {
    std::fprintf(stderr, "usage: compare_runs <loss tol> <norm tol> <param tol> <ref metrics> <got metrics> "
                         "[<ref weights> <got weights>]\n");
    return 2;
  }
  const double loss_tol = std::atof(argv[1]), norm_tol = std::atof(argv[2]), param_tol = std::atof(argv[3]);
  const double key_tol = 1e-4;  // absolute (RMS): AdamW moves it by at most lr per step
  const auto ref = read_metrics(argv[4]), got = read_metrics(argv[5]);
  bool ok = ref.size() == got.size() && !ref.empty();
  if (!ok) std::printf("steps differ: %zu reference, %zu here\n", ref.size(), got.size());
  double loss = 0, norm = 0;
  int loss_step = -1, norm_step = -1;
  for (std::size_t i = 0; i < std::min(ref.size(), got.size()); ++i) {
    const double l = rel_diff(number(got[i], "loss"), number(ref[i], "loss"));
    const double n = rel_diff(number(got[i], "grad_norm"), number(ref[i], "grad_norm"));
    if (!(l <= loss)) loss = l, loss_step = static_cast<int>(i);  // rel_diff is never NaN; infinite wins
    if (!(n <= norm)) norm = n, norm_step = static_cast<int>(i);
  }
  std::printf("%zu steps: loss max rel %.3g (step %d, tol %g), grad norm max rel %.3g (step %d, tol %g)", got.size(),
              loss, loss_step, loss_tol, norm, norm_step, norm_tol);
  ok = ok && loss <= loss_tol && norm <= norm_tol;
  if (argc == 8) {
    strata::SafetensorsReader a(argv[6]), b(argv[7]);
    double worst = 0, key_worst = 0;
    std::string worst_name;
    for (const std::string& name : a.names()) {
      if (!b.contains(name)) {
        std::printf("\ntensor %s is missing in %s", name.c_str(), argv[7]);
        ok = false;
        continue;
      }
      const std::vector<float> x = a.read_f32(name), y = b.read_f32(name);
      if (x.size() != y.size()) {
        std::printf("\ntensor %s: %zu vs %zu elements", name.c_str(), x.size(), y.size());
        ok = false;
        continue;
      }
      // The key bias's gradient is zero in exact arithmetic (softmax ignores a shift of every score of a row), so
      // its values are AdamW's response to round-off (|g| / eps): any two summation orders, plain data
      // parallelism included, give different ones. Its RMS difference is held to an absolute bound; q and v to the
      // common relative one.
      const bool qkv_bias = name.size() > 16 && name.compare(name.size() - 16, 16, "attn.c_attn.bias") == 0;
      const std::size_t parts = qkv_bias ? 3 : 1, part = x.size() / parts;
      for (std::size_t p = 0; p < parts; ++p) {
        double diff = 0, scale = 0;
        for (std::size_t i = p * part; i < (p + 1) * part; ++i) {
          const double d = strata::test::abs_diff(y[i], x[i]);  // infinite on a non-finite value
          diff += d * d;
          scale += static_cast<double>(x[i]) * x[i];
        }
        double r = qkv_bias && p == 1 ? std::sqrt(diff / part) : std::sqrt(diff / std::max(scale, 1e-300));
        if (!std::isfinite(r)) r = strata::test::kFar;
        const std::string what = qkv_bias ? name + "[" + "qkv"[p] + "]" : name;
        if (qkv_bias && p == 1) {
          key_worst = worse(key_worst, r);
          continue;
        }
        if (r > param_tol) std::printf("\n  %s: rel %.3g", what.c_str(), r);
        if (!(r < worst)) worst = r, worst_name = what;
      }
    }
    if (a.names().size() != b.names().size()) ok = false;
    std::printf(", parameters max rel %.3g (%s, tol %g), key biases RMS diff %.3g (tol %g)", worst, worst_name.c_str(),
                param_tol, key_worst, key_tol);
    ok = ok && worst <= param_tol && key_worst <= key_tol;
  }
  std::printf("%s\n", ok ? "" : "  FAIL");
  return ok ? 0 : 1;
}
