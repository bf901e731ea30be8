// collectives_bench: nccl-tests-style bandwidth and correctness benchmark of the Communicator, vs plain MPI.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/mpi_util.h"
#include "collectives/rank_values.h"
#include "runtime/bootstrap/config_agreement.h"
#include "runtime/bootstrap/runtime.h"
#include "core/dtype.h"
#include "core/env.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/file_checks.h"
#include "core/output_file.h"
#include <strata/flag_checks.h>  // CLI11 validators (installed; not in strata.h, which needs no CLI11)

namespace strata {
namespace {

// kRsAg is an all_reduce made of its halves: a reduce_scatter, then an all_gather in place of its output, in every
// iteration (the bar an all_reduce is held to; "all" leaves it out).
enum class BenchOp { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kRsAg };
constexpr BenchOp kAllOps[] = {BenchOp::kAllGather, BenchOp::kReduceScatter, BenchOp::kAllReduce, BenchOp::kBroadcast,
                               BenchOp::kRsAg};

const char* bench_op_name(BenchOp op) {
  switch (op) {
    case BenchOp::kAllGather: return "all_gather";
    case BenchOp::kReduceScatter: return "reduce_scatter";
    case BenchOp::kAllReduce: return "all_reduce";
    case BenchOp::kBroadcast: return "broadcast";
    case BenchOp::kRsAg: return "rs_ag";
  }
  return "?";
}

bool is_reduction(BenchOp op) {
  return op == BenchOp::kReduceScatter || op == BenchOp::kAllReduce || op == BenchOp::kRsAg;
}

// nccl-tests' bus bandwidth factors: what each rank's link carries relative to the buffer size.
double bus_factor(BenchOp op, int n) {
  switch (op) {
    case BenchOp::kAllGather:
    case BenchOp::kReduceScatter: return static_cast<double>(n - 1) / n;
    case BenchOp::kAllReduce:
    case BenchOp::kRsAg: return 2.0 * (n - 1) / n;
    case BenchOp::kBroadcast: return 1.0;
  }
  return 1.0;
}

// The memory bound of each collective, as a multiple of the memcpy rate m (bytes copied per second by one rank
// while every rank copies): the bytes a rank must read and write at least, for a buffer of `size` S on n ranks, are
// all_gather 2(n-1)/n S (each peer's piece read and written once), reduce_scatter (n+1)/n S (all n parts of its
// share read, its share written), all_reduce their sum (3n-1)/n S, broadcast 2S; a memcpy of B bytes moves 2B.
// Dividing nccl-tests' busbw formula by the time those bytes take at m gives busbw's ceiling.
double bound_factor(BenchOp op, int n) {
  const double r = n;
  switch (op) {
    case BenchOp::kAllGather: return 1.0;
    case BenchOp::kReduceScatter: return 2.0 * (r - 1) / (r + 1);
    case BenchOp::kAllReduce:
    case BenchOp::kRsAg: return 4.0 * (r - 1) / (3 * r - 1);
    case BenchOp::kBroadcast: return 1.0;
  }
  return 1.0;
}

struct BenchOptions {
  std::size_t min_bytes = 1024;
  std::size_t max_bytes = 64u << 20;
  std::size_t step_factor = 2;
  std::vector<BenchOp> ops;
  std::vector<DType> dtypes;
  ReduceOp reduce = ReduceOp::kSum;
  int iters = 20;
  int warmup = 5;
  std::string backend = "auto";
  std::string json_file;
  bool baseline = true;
  bool check = true;
};

// This process's rank as the launcher tells it (Open MPI, PMIx, Hydra), 0 without a launcher. CLI11 reports flag
// errors before MPI starts (the backend is a flag), and only one rank should print them.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 0;
}

// A CLI11 validator for size strings ("1K", "64M", "1G": binary multiples), via strata::parse_bytes.
CLI::Validator size_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          parse_bytes(text, "size");
          return {};
        } catch (const Error&) {
          return fmt::format("'{}' is not a size in bytes (examples: 4096, 1K, 64M, 1G)", text);
        }
      },
      "SIZE");
}

// The options every rank must share (strata::check_config_agreement): differing sizes or ops would pair different
// collectives.
std::vector<ConfigField> effective_configuration(const BenchOptions& o) {
  std::string ops, dtypes;
  for (BenchOp op : o.ops) ops += std::string(ops.empty() ? "" : ",") + bench_op_name(op);
  for (DType t : o.dtypes) dtypes += std::string(dtypes.empty() ? "" : ",") + dtype_name(t);
  auto v = [](auto x) { return fmt::format("{}", x); };
  return {{"program", "collectives_bench"}, {"--minbytes", v(o.min_bytes)}, {"--maxbytes", v(o.max_bytes)},
          {"--stepfactor", v(o.step_factor)}, {"--op", ops}, {"--dtype", dtypes},
          {"--reduce", reduce_op_name(o.reduce)}, {"--iters", v(o.iters)}, {"--warmup", v(o.warmup)},
          {"--backend", o.backend}, {"--json", o.json_file}, {"--no-baseline", v(!o.baseline)},
          {"--check", v(o.check)}};
}

// Parses the command line. Returns the exit code when the program should stop (--help, bad flags).
std::optional<int> parse_options(int argc, char** argv, BenchOptions& o) {
  CLI::App app("nccl-tests-style benchmark of the Strata Communicator (run under mpirun)", "collectives_bench");
  std::string min_text = "1K", max_text = "64M", reduce = "sum";
  std::vector<std::string> ops = {"all"}, dtypes = {"f32"};
  int check = 1;
  bool no_baseline = false;
  app.add_option("-b,--minbytes", min_text, "smallest size in bytes")->check(size_validator())->capture_default_str();
  app.add_option("-e,--maxbytes", max_text, "largest size in bytes")->check(size_validator())->capture_default_str();
  app.add_option("-f,--stepfactor", o.step_factor, "size multiplier between rows")
      ->check(flags::integer(2, 1 << 20))
      ->capture_default_str();
  app.add_option("--op", ops, "operations, comma list")
      ->delimiter(',')
      ->check(CLI::IsMember({"all_gather", "reduce_scatter", "all_reduce", "broadcast", "rs_ag", "all"}))
      ->capture_default_str();
  app.add_option("--dtype", dtypes, "element types, comma list")
      ->delimiter(',')
      ->check(CLI::IsMember({"f32", "bf16", "f16", "i32", "i64"}))
      ->capture_default_str();
  app.add_option("--reduce", reduce, "reduction of reduce_scatter and all_reduce")
      ->check(CLI::IsMember({"sum", "avg", "max"}))
      ->capture_default_str();
  app.add_option("-n,--iters", o.iters, "timed iterations")->check(flags::integer(1, 1 << 24))->capture_default_str();
  app.add_option("-w,--warmup", o.warmup, "untimed iterations first")
      ->check(flags::integer(0, 1 << 24))
      ->capture_default_str();
  app.add_option("--backend", o.backend, "Strata backend")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--json", o.json_file, "rank 0 writes the rows as JSON to FILE");
  app.add_flag("--no-baseline", no_baseline, "skip the plain MPI comparison (CPU backend)");
  app.add_option("-c,--check", check, "verify results (0 or 1)")->check(flags::integer(0, 1))->capture_default_str();

  std::ostream quiet(nullptr);
  bool speaker = launcher_rank() == 0;
  try {
    app.parse(argc, argv);
    o.min_bytes = parse_bytes(min_text, "--minbytes");
    o.max_bytes = parse_bytes(max_text, "--maxbytes");
    if (o.min_bytes > o.max_bytes)
      throw CLI::ValidationError("--minbytes", fmt::format("{} ({} B) is above --maxbytes {} ({} B)", min_text,
                                                           o.min_bytes, max_text, o.max_bytes));
  } catch (const CLI::ParseError& e) {
    return speaker ? app.exit(e) : app.exit(e, quiet, quiet);
  }
  for (const auto& name : ops) {
    for (BenchOp op : kAllOps)
      if (((name == "all" && op != BenchOp::kRsAg) || name == bench_op_name(op)) &&
          std::find(o.ops.begin(), o.ops.end(), op) == o.ops.end())
        o.ops.push_back(op);
  }
  for (const auto& name : dtypes) {
    DType t = parse_dtype(name);
    if (std::find(o.dtypes.begin(), o.dtypes.end(), t) == o.dtypes.end()) o.dtypes.push_back(t);
  }
  o.reduce = parse_reduce_op(reduce);
  o.baseline = !no_baseline;
  o.check = check != 0;
  return std::nullopt;
}

// ---- exactly verifiable data ------------------------------------------------------------------------------------

// A small non-negative integer from (seed, rank, index), below `range`. Every dtype holds it exactly, and with
// range = clamp(256 / ranks, 2, 17) a sum over up to 256 ranks stays an integer <= 256, exact even in bf16 whatever
// order the backend adds in. Non-negative, so integer avg truncates the same way on every backend.
int value_at(int seed, int rank, std::size_t index, int range) {
  std::uint64_t h = (static_cast<std::uint64_t>(seed) * 1000003u) ^ (static_cast<std::uint64_t>(rank) * 7919u) ^
                    (index * 2654435761u);
  h ^= h >> 13;
  return static_cast<int>(h % static_cast<std::uint64_t>(range));
}

void store(void* dst, std::size_t i, DType t, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(dst)[i] = v; break;
    case DType::kBF16: static_cast<std::uint16_t*>(dst)[i] = f32_to_bf16(v); break;
    case DType::kF16: static_cast<std::uint16_t*>(dst)[i] = f32_to_f16(v); break;
    case DType::kI32: static_cast<std::int32_t*>(dst)[i] = static_cast<std::int32_t>(v); break;
    case DType::kI64: static_cast<std::int64_t*>(dst)[i] = static_cast<std::int64_t>(v); break;
    default: STRATA_THROW(ErrorCode::kUnsupported, "collectives_bench has no data for dtype {}", dtype_name(t));
  }
}

double load(const void* src, std::size_t i, DType t) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(src)[i];
    case DType::kBF16: return bf16_to_f32(static_cast<const std::uint16_t*>(src)[i]);
    case DType::kF16: return f16_to_f32(static_cast<const std::uint16_t*>(src)[i]);
    case DType::kI32: return static_cast<const std::int32_t*>(src)[i];
    case DType::kI64: return static_cast<double>(static_cast<const std::int64_t*>(src)[i]);
    default: STRATA_THROW(ErrorCode::kUnsupported, "collectives_bench has no data for dtype {}", dtype_name(t));
  }
}

// The reduction over all ranks of value_at(seed, r, index), in the arithmetic the backends promise: integers
// exactly, floats summed in f32 in rank order, divided once for avg, rounded once to the storage type.
double expected_reduce(DType t, ReduceOp op, int seed, int n, std::size_t index, int range) {
  if (t == DType::kI32 || t == DType::kI64) {
    long long acc = value_at(seed, 0, index, range);
    for (int r = 1; r < n; ++r) {
      long long v = value_at(seed, r, index, range);
      acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
    }
    return static_cast<double>(op == ReduceOp::kAvg ? acc / n : acc);
  }
  float acc = static_cast<float>(value_at(seed, 0, index, range));
  for (int r = 1; r < n; ++r) {
    float v = static_cast<float>(value_at(seed, r, index, range));
    acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
  }
  if (op == ReduceOp::kAvg) acc /= static_cast<float>(n);
  if (t == DType::kBF16) return bf16_to_f32(f32_to_bf16(acc));
  if (t == DType::kF16) return f16_to_f32(f32_to_f16(acc));
  return acc;
}

// ---- one row ----------------------------------------------------------------------------------------------------

// The element counts of one row, rounded down as nccl-tests does so that every rank's part is whole.
struct Shape {
  std::size_t count = 0;       // the Communicator's count argument (nccl-tests' "count" column)
  std::size_t bytes = 0;       // all_gather: recv size; reduce_scatter: send size; else the buffer
  std::size_t send_elems = 0;  // per rank
  std::size_t recv_elems = 0;
};

Shape shape_of(BenchOp op, std::size_t bytes, DType t, int n) {
  std::size_t esz = dtype_size(t), elems = bytes / esz, ranks = static_cast<std::size_t>(n);
  switch (op) {
    case BenchOp::kAllGather: {
      std::size_t c = elems / ranks;
      return {c, c * ranks * esz, c, c * ranks};
    }
    case BenchOp::kReduceScatter: {
      std::size_t c = elems / ranks;
      return {c, c * ranks * esz, c * ranks, c};
    }
    case BenchOp::kAllReduce:
    case BenchOp::kBroadcast: return {elems, elems * esz, elems, elems};
    case BenchOp::kRsAg: {  // count: each rank's part
      std::size_t c = elems / ranks;
      return {c, c * ranks * esz, c * ranks, c * ranks};
    }
  }
  return {};
}

struct Row {
  BenchOp op = BenchOp::kAllGather;
  DType dtype = DType::kF32;
  Shape shape;
  double time_us = 0, algbw = 0, busbw = 0;
  std::optional<long long> wrong;  // absent with --check 0
  std::optional<double> mpi_time_us, mpi_busbw;
  std::optional<double> memcpy_gbs, bound_gbs;  // CPU backend: memcpy of `bytes` on every rank at once, busbw's ceiling
};

class Bench {
 public:
  Bench(Runtime& rt, const BenchOptions& o) : o_(o), comm_(rt.world()), dev_(rt.device()) {
    MPI_Request req;
    STRATA_CHECK_MPI(MPI_Comm_idup(MPI_COMM_WORLD, &plain_, &req));
    mpi_wait(req, dev_.timeout_s(), "duplicating MPI_COMM_WORLD for the baseline");
    stream_ = dev_.create_stream("bench");
    std::size_t cap = std::max<std::size_t>(o.max_bytes, 1);
    // Three buffers of the largest size (send, receive, and a host copy to check results): a size this machine
    // cannot hold is refused here, naming it, before anything is allocated (the device checks its own memory too).
    check_host_allocation(dev_.kind() == DeviceKind::kCpu ? 3 * static_cast<std::uint64_t>(cap) : cap, 0,
                          fmt::format("--maxbytes {}: the benchmark's buffers ({} of {} each)", o.max_bytes,
                                      dev_.kind() == DeviceKind::kCpu ? 3 : 1, bytes_text(cap)));
    send_ = dev_.allocate(cap, MemCategory::kOther);
    recv_ = dev_.allocate(cap, MemCategory::kOther);
    host_.resize(cap);
    n_ = comm_.size();
    range_ = std::clamp(256 / n_, 2, 17);
  }
  ~Bench() {
    if (std::uncaught_exceptions() > 0) {
      // Unwinding towards run_main's MPI_Abort: joining the stream could wait on a collective that never ends.
      (void)stream_.release();
      return;
    }
    MPI_Comm_free(&plain_);
  }
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  bool has_baseline() const { return o_.baseline && dev_.kind() == DeviceKind::kCpu; }

  Row run(BenchOp op, DType t, std::size_t bytes, int seed) {
    Row row;
    row.op = op;
    row.dtype = t;
    row.shape = shape_of(op, bytes, t, n_);
    const Shape& s = row.shape;
    ReduceOp rop = is_reduction(op) ? o_.reduce : ReduceOp::kSum;
    fill_input(t, s, seed);
    double sec = time_loop([&] { issue(op, t, s, rop); }, [&] { stream_->synchronize(); });
    row.time_us = sec * 1e6;
    row.algbw = sec > 0 ? static_cast<double>(s.bytes) / sec / 1e9 : 0;
    row.busbw = row.algbw * bus_factor(op, n_);
    if (dev_.kind() == DeviceKind::kCpu && s.bytes > 0) {
      double csec = time_loop([&] { copy_once(s.bytes); }, [] {});
      row.memcpy_gbs = static_cast<double>(s.bytes) / csec / 1e9;
      row.bound_gbs = *row.memcpy_gbs * bound_factor(op, n_);
    }
    if (o_.check) row.wrong = check(op, t, s, rop, seed + 1);
    if (std::optional<MPI_Op> mop = baseline_op(op, t, s)) {
      double msec = time_loop([&] { issue_plain(op, t, s, *mop); }, [] {});
      row.mpi_time_us = msec * 1e6;
      row.mpi_busbw = msec > 0 ? static_cast<double>(s.bytes) / msec / 1e9 * bus_factor(op, n_) : 0;
    }
    return row;
  }

 private:
  // The MPI reduction for the plain baseline, or nothing when there is no baseline for this row: 16-bit floats
  // have no MPI reduction type, and MPI has no average (avg is timed as MPI_SUM: the same bytes, one less pass).
  std::optional<MPI_Op> baseline_op(BenchOp op, DType t, const Shape& s) const {
    if (!has_baseline() || s.count == 0 || s.count > static_cast<std::size_t>(INT_MAX)) return std::nullopt;
    if (!is_reduction(op)) return MPI_OP_NULL;
    if (t == DType::kBF16 || t == DType::kF16) return std::nullopt;
    return o_.reduce == ReduceOp::kMax ? MPI_MAX : MPI_SUM;
  }

  // One memcpy of `bytes` between the benchmark's own (host) buffers, every rank at once in time_loop.
  void copy_once(std::size_t bytes) {
    std::memcpy(recv_.data(), send_.data(), bytes);
    asm volatile("" : : "r"(recv_.data()) : "memory");  // the copy is not dead code
  }

  void fill_input(DType t, const Shape& s, int seed) {
    int me = comm_.rank();
    for (std::size_t i = 0; i < s.send_elems; ++i) store(host_.data(), i, t, float(value_at(seed, me, i, range_)));
    dev_.copy_from_host(send_.data(), host_.data(), s.send_elems * dtype_size(t));
  }

  void issue(BenchOp op, DType t, const Shape& s, ReduceOp rop) {
    switch (op) {
      case BenchOp::kAllGather: return comm_.all_gather(send_.data(), recv_.data(), s.count, t, *stream_);
      case BenchOp::kReduceScatter: return comm_.reduce_scatter(send_.data(), recv_.data(), s.count, t, rop, *stream_);
      case BenchOp::kAllReduce: return comm_.all_reduce(send_.data(), recv_.data(), s.count, t, rop, *stream_);
      case BenchOp::kBroadcast: return comm_.broadcast(send_.data(), recv_.data(), s.count, t, 0, *stream_);
      case BenchOp::kRsAg: {
        char* mine = recv_.as<char>() + static_cast<std::size_t>(comm_.rank()) * s.count * dtype_size(t);
        comm_.reduce_scatter(send_.data(), mine, s.count, t, rop, *stream_);
        return comm_.all_gather(mine, recv_.data(), s.count, t, *stream_);
      }
    }
  }

  // Plain blocking MPI on the same buffers; broadcast sends from the root's send buffer, as ours reads it.
  void issue_plain(BenchOp op, DType t, const Shape& s, MPI_Op mop) {
    MPI_Datatype mt = mpi_datatype(t);
    int c = static_cast<int>(s.count);
    switch (op) {
      case BenchOp::kAllGather:
        STRATA_CHECK_MPI(MPI_Allgather(send_.data(), c, mt, recv_.data(), c, mt, plain_));
        return;
      case BenchOp::kReduceScatter:
        STRATA_CHECK_MPI(MPI_Reduce_scatter_block(send_.data(), recv_.data(), c, mt, mop, plain_));
        return;
      case BenchOp::kAllReduce: STRATA_CHECK_MPI(MPI_Allreduce(send_.data(), recv_.data(), c, mt, mop, plain_)); return;
      case BenchOp::kBroadcast:
        STRATA_CHECK_MPI(MPI_Bcast(comm_.rank() == 0 ? send_.data() : recv_.data(), c, mt, 0, plain_));
        return;
      case BenchOp::kRsAg: {
        char* mine = recv_.as<char>() + static_cast<std::size_t>(comm_.rank()) * s.count * dtype_size(t);
        STRATA_CHECK_MPI(MPI_Reduce_scatter_block(send_.data(), mine, c, mt, mop, plain_));
        STRATA_CHECK_MPI(MPI_Allgather(MPI_IN_PLACE, 0, mt, recv_.data(), c, mt, plain_));
        return;
      }
    }
  }

  // Warm-up, a bounded barrier, then `iters` issues and one finish; returns seconds per op, the max over ranks.
  double time_loop(const std::function<void()>& issue_one, const std::function<void()>& finish) {
    for (int i = 0; i < o_.warmup; ++i) issue_one();
    finish();
    MPI_Request req;
    STRATA_CHECK_MPI(MPI_Ibarrier(plain_, &req));
    mpi_wait(req, dev_.timeout_s(), "barrier before a timed loop");
    double t0 = MPI_Wtime();
    for (int i = 0; i < o_.iters; ++i) issue_one();
    finish();
    double mine = (MPI_Wtime() - t0) / o_.iters, slowest = 0;
    STRATA_CHECK_MPI(MPI_Iallreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, plain_, &req));
    mpi_wait(req, dev_.timeout_s(), "max of the loop times");
    return slowest;
  }

  // One more iteration on fresh inputs into a poisoned output; returns the wrong elements summed over ranks.
  long long check(BenchOp op, DType t, const Shape& s, ReduceOp rop, int seed) {
    std::size_t out_bytes = s.recv_elems * dtype_size(t);
    fill_input(t, s, seed);
    std::fill(host_.begin(), host_.begin() + static_cast<std::ptrdiff_t>(out_bytes), char(0xff));  // NaN / -1
    dev_.copy_from_host(recv_.data(), host_.data(), out_bytes);
    issue(op, t, s, rop);
    stream_->synchronize();
    dev_.copy_to_host(host_.data(), recv_.data(), out_bytes);
    // NCCL's avg of floats pre-multiplies each input by 1/n: allow its roundings where 1/n is inexact.
    bool premul = dev_.kind() == DeviceKind::kCuda && rop == ReduceOp::kAvg && dtype_is_float(t) && is_reduction(op);
    double unit = t == DType::kBF16 ? 0x1p-8 : t == DType::kF16 ? 0x1p-11 : 0x1p-24;
    double tol = premul ? 2.0 * (n_ + 1) * unit : 0.0;
    int me = comm_.rank();
    long long wrong = 0;
    for (std::size_t i = 0; i < s.recv_elems; ++i) {
      double want = 0;
      switch (op) {
        case BenchOp::kAllGather: want = value_at(seed, int(i / s.count), i % s.count, range_); break;
        case BenchOp::kReduceScatter:
          want = expected_reduce(t, rop, seed, n_, std::size_t(me) * s.count + i, range_);
          break;
        case BenchOp::kAllReduce:
        case BenchOp::kRsAg: want = expected_reduce(t, rop, seed, n_, i, range_); break;
        case BenchOp::kBroadcast: want = value_at(seed, 0, i, range_); break;
      }
      double got = load(host_.data(), i, t);
      if (!(std::fabs(got - want) <= tol * std::fabs(want))) ++wrong;
    }
    long long total = 0;
    MPI_Request req;
    STRATA_CHECK_MPI(MPI_Iallreduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, plain_, &req));
    mpi_wait(req, dev_.timeout_s(), "sum of wrong elements");
    return total;
  }

  const BenchOptions& o_;
  Communicator& comm_;
  Device& dev_;
  MPI_Comm plain_ = MPI_COMM_NULL;  // the baseline's own communicator, also for barriers and verdicts
  std::unique_ptr<Stream> stream_;
  Buffer send_, recv_;
  std::vector<char> host_;
  int n_ = 1;
  int range_ = 17;
};

// ---- output -----------------------------------------------------------------------------------------------------

std::string mpi_library() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, static_cast<std::size_t>(len));
  return s.substr(0, s.find_first_of(",\n"));
}

std::string join_dtypes(const std::vector<DType>& ts) {
  std::string out;
  for (DType t : ts) out += (out.empty() ? "" : ",") + std::string(dtype_name(t));
  return out;
}

void print_table_header(BenchOp op, bool baseline) {
  fmt::print("#\n# {}\n#{:>11} {:>12} {:>5} {:>6} {:>10} {:>12} {:>12} {:>7}", bench_op_name(op), "size", "count",
             "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  if (baseline) fmt::print(" {:>10} {:>6}", "mpi_busbw", "ratio");
  fmt::print(" {:>8} {:>8}\n", "bound", "of_bound");
}

void print_row(const Row& r, ReduceOp rop, bool baseline) {
  fmt::print("{:>12} {:>12} {:>5} {:>6} {:>10.1f} {:>12.2f} {:>12.2f} {:>7}", r.shape.bytes, r.shape.count,
             dtype_name(r.dtype), is_reduction(r.op) ? reduce_op_name(rop) : "none", r.time_us, r.algbw, r.busbw,
             r.wrong ? std::to_string(*r.wrong) : "N/A");
  if (baseline) {
    bool has = r.mpi_busbw.has_value();
    fmt::print(" {:>10} {:>6}", has ? fmt::format("{:.2f}", *r.mpi_busbw) : "-",
               has && *r.mpi_busbw > 0 ? fmt::format("{:.2f}", r.busbw / *r.mpi_busbw) : "-");
  }
  bool bounded = r.bound_gbs && *r.bound_gbs > 0;
  fmt::print(" {:>8} {:>8}\n", bounded ? fmt::format("{:.2f}", *r.bound_gbs) : "-",
             bounded ? fmt::format("{:.2f}", r.busbw / *r.bound_gbs) : "-");
  std::fflush(stdout);
}

using Json = nlohmann::ordered_json;  // keys in the order written

Json row_json(const Row& r, const Runtime& rt, ReduceOp rop) {
  auto opt = [](const auto& v) { return v ? Json(*v) : Json(nullptr); };
  bool ratio = r.mpi_busbw && *r.mpi_busbw > 0;
  return {{"op", bench_op_name(r.op)},
          {"dtype", dtype_name(r.dtype)},
          {"redop", is_reduction(r.op) ? reduce_op_name(rop) : "none"},
          {"backend", device_kind_name(rt.backend())},
          {"ranks", rt.world_size()},
          {"bytes", r.shape.bytes},
          {"count", r.shape.count},
          {"time_us", r.time_us},
          {"algbw_gbs", r.algbw},
          {"busbw_gbs", r.busbw},
          {"wrong", opt(r.wrong)},
          {"mpi_time_us", opt(r.mpi_time_us)},
          {"mpi_busbw_gbs", opt(r.mpi_busbw)},
          {"ratio", ratio ? Json(r.busbw / *r.mpi_busbw) : Json(nullptr)},
          {"memcpy_gbs", opt(r.memcpy_gbs)},
          {"bound_gbs", opt(r.bound_gbs)},
          {"of_bound", r.bound_gbs && *r.bound_gbs > 0 ? Json(r.busbw / *r.bound_gbs) : Json(nullptr)}};
}

int run_bench(Runtime& rt, const BenchOptions& o) {
  bool speaker = rt.rank() == 0;
  OutputFile json_out;
  std::string problem;
  if (speaker && !o.json_file.empty()) {  // checked and opened first: a bad path fails before the run, on every rank
    try {
      check_output_file(o.json_file, "--json", OutputKind::kDirect);
      json_out = OutputFile(o.json_file, "--json");
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  all_agree(rt.world(), problem.empty(), problem, "opening --json " + o.json_file);
  Bench bench(rt, o);
  bool baseline = bench.has_baseline();
  if (speaker) {
    fmt::print("# collectives_bench: backend {} ({}), {} rank{}, dtype {}, iters {}, warmup {}\n",
               device_kind_name(rt.backend()), rt.world().backend_name(), rt.world_size(),
               rt.world_size() == 1 ? "" : "s", join_dtypes(o.dtypes), o.iters, o.warmup);
    fmt::print("# sizes {} .. {} bytes, step x{}, reduce {}, check {}, {}\n", o.min_bytes, o.max_bytes, o.step_factor,
               reduce_op_name(o.reduce), o.check ? "on" : "off",
               !baseline                    ? "no baseline"
               : o.reduce == ReduceOp::kAvg ? "baseline: plain blocking MPI (avg timed as MPI_SUM)"
                                            : "baseline: plain blocking MPI");
    fmt::print("# {}; MPI: {}\n", rt.describe(), mpi_library());
  }
  std::vector<Row> rows;
  int seed = 1;
  for (BenchOp op : o.ops) {
    if (speaker) print_table_header(op, baseline);
    for (DType t : o.dtypes) {
      for (std::size_t bytes = o.min_bytes;; bytes = bytes == 0 ? 1 : bytes * o.step_factor) {
        rows.push_back(bench.run(op, t, bytes, seed));
        seed += 2;
        if (speaker) print_row(rows.back(), o.reduce, baseline);
        if (bytes > o.max_bytes / o.step_factor || o.max_bytes == 0) break;
      }
    }
  }
  double busbw = 0, mpi_busbw = 0;
  long long wrong = 0, mpi_rows = 0;
  for (const Row& r : rows) {
    busbw += r.busbw;
    wrong += r.wrong.value_or(0);
    if (r.mpi_busbw) {
      mpi_busbw += *r.mpi_busbw;
      ++mpi_rows;
    }
  }
  if (speaker) {
    fmt::print("#\n# Avg bus bandwidth    : {:.3f}\n", rows.empty() ? 0.0 : busbw / double(rows.size()));
    if (mpi_rows)
      fmt::print("# Avg mpi bus bandwidth: {:.3f} (over {} rows)\n", mpi_busbw / double(mpi_rows), mpi_rows);
    if (o.check)
      fmt::print("# Out of bounds values : {} {}\n#\n", wrong, wrong == 0 ? "OK" : "FAILED");
    else
      fmt::print("# Out of bounds values : N/A (--check 0)\n#\n");
    std::fflush(stdout);
    if (json_out.is_open()) {
      Json all = Json::array();
      for (const Row& r : rows) all.push_back(row_json(r, rt, o.reduce));
      json_out.write(all.dump(2) + "\n");  // kIo naming the file and the system error
      json_out.close();
    }
  }
  return wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  return strata::run_main([&] {
    strata::BenchOptions options;
    if (std::optional<int> rc = strata::parse_options(argc, argv, options)) return *rc;
    strata::Runtime runtime(&argc, &argv, strata::RuntimeOptions{options.backend});
    strata::check_config_agreement(strata::effective_configuration(options));
    const int rc = strata::run_bench(runtime, options);
    runtime.finish();  // the trace, if on: a failed write is an error
    return rc;
  });
}
