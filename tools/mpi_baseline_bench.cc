// mpi_baseline_bench: a plain blocking MPI program (no Strata libraries), the outside baseline for collectives_bench.
//
// It times MPI_Allgather, MPI_Reduce_scatter_block and MPI_Allreduce on f32 with the sizes, `bytes` meaning and
// busbw formulas of collectives_bench, so that the two tables can be put side by side (scripts/bench_collectives.sh),
// and prints single-thread memcpy bandwidth at each size as the ceiling of a host copy. Buffers are allocated and
// touched once before any timing, as any program that reuses its buffers would.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  std::fprintf(stderr, "mpi_baseline_bench: %s failed: %.*s\n", call, len, text);
  MPI_Abort(MPI_COMM_WORLD, 1);
}
#define CHECK_MPI(call) check((call), #call)

// "1K", "64M", "1G" (binary multiples) or a plain number; 0 when unreadable.
std::size_t parse_size(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || v < 0) return 0;
  switch (*end) {
    case 'K':
    case 'k': v *= 1024.0; break;
    case 'M':
    case 'm': v *= 1024.0 * 1024; break;
    case 'G':
    case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<std::size_t>(v);
}

struct Options {
  std::size_t min_bytes = 1024, max_bytes = 64u << 20, step = 2;
  int iters = 20, warmup = 5;
  bool thread_multiple = false;  // --thread-multiple: MPI_Init_thread(MPI_THREAD_MULTIPLE), as the Strata Runtime
  bool in_place = false;         // --in-place: all_reduce with MPI_IN_PLACE (Open MPI takes other algorithms)
  std::string op = "all";        // --op all_gather | reduce_scatter | all_reduce | all
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "-h" || a == "--help") return false;
    if (a == "--thread-multiple") {
      o.thread_multiple = true;
      continue;
    }
    if (a == "--in-place") {
      o.in_place = true;
      continue;
    }
    if (!(v = value())) return false;
    if (a == "-b" || a == "--minbytes")
      o.min_bytes = parse_size(v);
    else if (a == "-e" || a == "--maxbytes")
      o.max_bytes = parse_size(v);
    else if (a == "-f" || a == "--stepfactor")
      o.step = std::strtoul(v, nullptr, 10);
    else if (a == "-n" || a == "--iters")
      o.iters = std::atoi(v);
    else if (a == "-w" || a == "--warmup")
      o.warmup = std::atoi(v);
    else if (a == "--op")
      o.op = v;
    else
      return false;
  }
  return o.min_bytes > 0 && o.min_bytes <= o.max_bytes && o.step >= 2 && o.iters > 0 && o.warmup >= 0 &&
         (o.op == "all" || o.op == "all_gather" || o.op == "reduce_scatter" || o.op == "all_reduce");
}

enum Op { kAllGather, kReduceScatter, kAllReduce };
const char* op_name(Op op) {
  return op == kAllGather ? "all_gather" : op == kReduceScatter ? "reduce_scatter" : "all_reduce";
}

// Warm-up, a barrier, `iters` calls; seconds per call, the max over ranks.
template <typename Fn>
double time_loop(const Options& o, Fn&& fn) {
  for (int i = 0; i < o.warmup; ++i) fn();
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  double t0 = MPI_Wtime();
  for (int i = 0; i < o.iters; ++i) fn();
  double mine = (MPI_Wtime() - t0) / o.iters, slowest = 0;
  CHECK_MPI(MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return slowest;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool ok = parse(argc, argv, o);
  int provided = 0;
  CHECK_MPI(MPI_Init_thread(&argc, &argv, o.thread_multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, &provided));
  int rank = 0, n = 1;
  CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &n));
  if (!ok) {
    if (rank == 0)
      std::fprintf(stderr,
                   "usage: mpirun -np N mpi_baseline_bench [-b MINBYTES] [-e MAXBYTES] [-f STEP] [-n ITERS] "
                   "[-w WARMUP]\n         [--op all_gather|reduce_scatter|all_reduce] [--thread-multiple]\n"
                   "  (sizes like 1K, 64M; defaults -b 1K -e 64M -f 2 -n 20 -w 5)\n");
    MPI_Finalize();
    return 2;
  }
  // Every buffer once, at the largest size, touched before timing: three of them must fit this machine's memory (an
  // impossible -e is named here, not met as the OOM killer or a bare bad_alloc).
  const double machine = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (3.0 * static_cast<double>(o.max_bytes) > machine) {
    if (rank == 0)
      std::fprintf(stderr, "mpi_baseline_bench: -e %zu: three buffers of %zu bytes are more than this machine's %.0f "
                   "bytes of memory\n", o.max_bytes, o.max_bytes, machine);
    MPI_Finalize();
    return 2;
  }
  std::vector<float> send(o.max_bytes / 4 + 1, 1.0f), recv(o.max_bytes / 4 + 1, 0.0f), copy(o.max_bytes / 4 + 1, 0.0f);
  const double ranks = n;
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int vlen = 0;
  MPI_Get_library_version(version, &vlen);
  std::string lib(version, static_cast<std::size_t>(vlen));
  lib = lib.substr(0, lib.find_first_of(",\n"));
  if (rank == 0) {
    std::printf("# mpi_baseline_bench: plain blocking MPI on MPI_COMM_WORLD, %d rank%s, f32, iters %d, warmup %d, %s\n",
                n, n == 1 ? "" : "s", o.iters, o.warmup,
                o.thread_multiple ? "MPI_THREAD_MULTIPLE" : "MPI_THREAD_SINGLE");
    std::printf(
        "# sizes %zu .. %zu bytes, step x%zu; memcpy: one thread copying `size` bytes between two pre-touched "
        "buffers (the ceiling of a host copy); MPI: %s\n",
        o.min_bytes, o.max_bytes, o.step, lib.c_str());
  }
  for (Op op : {kAllGather, kReduceScatter, kAllReduce}) {
    if (o.op != "all" && o.op != op_name(op)) continue;
    if (rank == 0)
      std::printf("#\n# %s\n#%11s %12s %5s %6s %10s %12s %12s %12s\n", op_name(op), "size", "count", "type", "redop",
                  "time(us)", "algbw(GB/s)", "busbw(GB/s)", "memcpy(GB/s)");
    for (std::size_t bytes = o.min_bytes;; bytes *= o.step) {
      // The rounding and factors of collectives_bench: whole f32 elements per rank.
      std::size_t elems = bytes / 4, per_rank = elems / static_cast<std::size_t>(n);
      std::size_t count = op == kAllReduce ? elems : per_rank;
      std::size_t used = (op == kAllReduce ? elems : per_rank * static_cast<std::size_t>(n)) * 4;
      double factor = op == kAllReduce ? 2.0 * (ranks - 1) / ranks : (ranks - 1) / ranks;
      int c = static_cast<int>(count);
      double sec = 0;
      if (count > 0) {
        switch (op) {
          case kAllGather:
            sec = time_loop(o, [&] {
              CHECK_MPI(MPI_Allgather(send.data(), c, MPI_FLOAT, recv.data(), c, MPI_FLOAT, MPI_COMM_WORLD));
            });
            break;
          case kReduceScatter:
            sec = time_loop(o, [&] {
              CHECK_MPI(MPI_Reduce_scatter_block(send.data(), recv.data(), c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
            });
            break;
          case kAllReduce:
            sec = time_loop(o, [&] {
              CHECK_MPI(MPI_Allreduce(o.in_place ? MPI_IN_PLACE : send.data(), recv.data(), c, MPI_FLOAT, MPI_SUM,
                                      MPI_COMM_WORLD));
            });
            break;
        }
      }
      // memcpy of the same `bytes` on every rank at once (the ranks share the memory system, as in a collective).
      double msec = time_loop(o, [&] {
        std::memcpy(copy.data(), send.data(), used);
        asm volatile("" : : "r"(copy.data()) : "memory");  // the copy is not dead code
      });
      double algbw = sec > 0 ? static_cast<double>(used) / sec / 1e9 : 0;
      double mbw = msec > 0 ? static_cast<double>(used) / msec / 1e9 : 0;
      if (rank == 0)
        std::printf("%12zu %12zu %5s %6s %10.1f %12.2f %12.2f %12.2f\n", used, count, "f32",
                    op == kAllGather ? "none" : "sum", sec * 1e6, algbw, algbw * factor, mbw);
      std::fflush(stdout);
      if (bytes > o.max_bytes / o.step) break;
    }
  }
  MPI_Finalize();
  return 0;
}
