// strata::Env: every STRATA_* environment variable, read in one place and logged once.
#pragma once

#include <cstddef>
#include <string>

namespace strata {

struct Env {
  std::string backend = "auto";    // STRATA_BACKEND: auto | cpu | cuda
  // STRATA_COMM: which communicator the runtime builds. auto: MPI on the CPU backend, NCCL on CUDA; nccl: NCCL (a CUDA
  // device only); mpi: MPI, host-staged on a CUDA device (so that several ranks may share one GPU); mpi-staged: the
  // host-staged MPI communicator on any backend (tests its staging on the CPU). See collectives/communicator_registry.h.
  std::string comm = "auto";
  double timeout_s = 600.0;        // STRATA_TIMEOUT_S: bound on every wait
  bool validate = false;           // STRATA_VALIDATE: cross-rank check of every collective
  bool shm = true;                 // STRATA_SHM: intra-node shared-memory collectives on the CPU backend (0: MPI only)
  // STRATA_SHM_IN_PLACE: with STRATA_SHM, the CPU device puts what collectives read in shared host memory, so that a
  // peer reads it where it lies (0: private memory, every input copied through the segment's slots).
  bool shm_in_place = true;
  std::string log_level = "info";  // STRATA_LOG_LEVEL: spdlog level spec, e.g. "info,comm=debug"
  std::string log_ranks = "0";     // STRATA_LOG_RANKS: "all" or a comma list of ranks that print info
  std::string trace_file;          // STRATA_TRACE: Chrome-trace output file (empty: off)
  std::size_t device_memory = 0;   // STRATA_DEVICE_MEMORY: allocator budget in bytes (0: unlimited)
  // STRATA_RANKS_PER_NODE: treat world ranks [k K, (k + 1) K) as node k, whatever machines they run on (rehearsing a
  // multi-node layout on one machine; the last node holds the rest). 0: the nodes MPI reports.
  int ranks_per_node = 0;
  // STRATA_FAULT: a fault to inject, for the fault tests: "checkpoint-kill:R[:K]" (rank R kills itself with SIGKILL
  // half-way through writing its K-th checkpoint data file, default the first) or "checkpoint-enospc:R[:K]" (that
  // write fails as on a full disk), or "pp-no-send:R" (pp rank R of every pipeline drops its point-to-point sends).
  // Empty: none.
  std::string fault;
  int fault_pp_no_send = -1;  // pp-no-send's R
  int fault_rank = -1;        // the RANK (or PP_RANK) of STRATA_FAULT, checked against the job's size at start-up

  // Reads the process environment. Bad values throw strata::Error naming the variable.
  static Env from_environment();
  // One line per variable, for the start-up log.
  std::string describe() const;
};

// The process-wide Env, read on first use.
const Env& env();
// Tests and embedders may replace it (before strata::Runtime starts).
void set_env(const Env& e);

// The longest timeout parse_seconds accepts: 1e7 s (about 115 days). Larger values (and inf, nan) are refused.
inline constexpr double kMaxSeconds = 1e7;

// Parses "600", "2.5" (a finite number in (0, kMaxSeconds]); "80GB", "512MiB", "1K" (binary multiples; a finite
// number >= 0 whose product with the unit fits std::size_t). Throws kInvalidArgument naming `what`.
double parse_seconds(const std::string& text, const char* what);
std::size_t parse_bytes(const std::string& text, const char* what);
// parse_bytes for a memory budget: 0 is refused (nothing fits in it; a budget left unset is no budget).
std::size_t parse_memory_budget(const std::string& text, const char* what);

}  // namespace strata
