// bench_adamw: Strata's AdamW (vectorised, OpenMP-threaded; runtime/optim/adamw.cc) against a plain scalar loop,
// side by side in one run, in nanoseconds per parameter. The offload path runs this update on the host.
// Usage: build/bin/bench_adamw [--sizes 65536,16777216] [--reps 20] [--json]
#include <omp.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/host_memory.h"
#include "core/tool_main.h"
#include <strata/flag_checks.h>  // CLI11 validators (installed; not in strata.h, which needs no CLI11)
#include "runtime/optim/adamw.h"

namespace {

template <typename Fn>
double median_ns_per_param(std::size_t n, int reps, Fn&& fn) {
  std::vector<double> t;
  for (int r = 0; r < reps + 2; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn(r + 1);
    double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 2) t.push_back(ns / static_cast<double>(n));  // two warm-up runs
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_adamw: Strata's AdamW against a plain scalar loop (ns per parameter)"};
  std::vector<std::size_t> sizes{1u << 16, 1u << 24};
  int reps = 20;
  bool json = false;
  app.add_option("--sizes", sizes, "parameters per update")->delimiter(',');
  app.add_option("--reps", reps, "timed repetitions (median reported)")->check(strata::flags::positive_integer());
  app.add_flag("--json", json, "one JSON line per size");
  CLI11_PARSE(app, argc, argv);
  return strata::run_tool("bench_adamw", [&] {
    strata::AdamWConfig cfg;
    // omp_get_max_threads() ignores OMP_THREAD_LIMIT (libgomp): report and use what a parallel region can get.
    const int max_threads = std::min(omp_get_max_threads(), omp_get_thread_limit());
    if (!json)
      std::printf(
          "| parameters | scalar loop (ns/param) | Strata, 1 thread | Strata, %d threads | speed-up 1 thread | "
          "speed-up %d threads |\n|---|---|---|---|---|---|\n",
          max_threads, max_threads);
    for (std::size_t n : sizes) {
      strata::check_host_allocation(16 * static_cast<std::uint64_t>(n), 0,
                                    fmt::format("--sizes {}: 4 arrays of {} floats", n, n));
      std::vector<float> p(n, 0.5f), g(n), m(n, 0.0f), v(n, 0.0f);
      for (std::size_t i = 0; i < n; ++i) g[i] = static_cast<float>(static_cast<int>(i % 2001) - 1000) * 1e-5f;
      const double scalar = median_ns_per_param(n, reps, [&](int t) {
        strata::adamw_update_scalar(p.data(), g.data(), m.data(), v.data(), n, cfg, 1e-3, t, true);
      });
      omp_set_num_threads(1);
      const double one = median_ns_per_param(
          n, reps, [&](int t) { strata::adamw_update(p.data(), g.data(), m.data(), v.data(), n, cfg, 1e-3, t, true); });
      omp_set_num_threads(max_threads);
      const double all = median_ns_per_param(
          n, reps, [&](int t) { strata::adamw_update(p.data(), g.data(), m.data(), v.data(), n, cfg, 1e-3, t, true); });
      if (json)
        std::printf(
            "{\"parameters\": %zu, \"scalar_ns\": %.4f, \"strata_1_thread_ns\": %.4f, \"strata_ns\": %.4f, "
            "\"threads\": %d}\n",
            n, scalar, one, all, max_threads);
      else
        std::printf("| %zu | %.3f | %.3f | %.3f | %.2fx | %.2fx |\n", n, scalar, one, all, scalar / one, scalar / all);
    }
    return 0;
  });
}
