// Runtime: MPI start-up, rank identity, backend and device choice, the world communicator; run_main.
#include "runtime/bootstrap/runtime.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <new>
#include <thread>
#include <vector>

#include "collectives/communicator_registry.h"
#include "collectives/mpi_util.h"
#include "collectives/progress_ledger.h"
#include "collectives/rank_values.h"
#include "runtime/bootstrap/config_agreement.h"
#include "core/device_registry.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/logging.h"
#include "core/output_file.h"
#include "core/tracer.h"

namespace strata {
namespace {

std::atomic<bool> g_shutdown_failed{false};  // a Runtime's destructor met an error it could only log

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

}  // namespace

Runtime::Runtime(int* argc, char*** argv, const RuntimeOptions& options) {
  int initialized = 0;
  STRATA_CHECK_MPI(MPI_Initialized(&initialized));
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    STRATA_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    owns_mpi_ = true;
  } else {
    STRATA_CHECK_MPI(MPI_Query_thread(&provided));
  }
  STRATA_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  STRATA_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  set_process_identity(rank_, world_size_);
  STRATA_CHECK_CODE(ErrorCode::kMpi, provided == MPI_THREAD_MULTIPLE,
                    "MPI provides {} but Strata needs MPI_THREAD_MULTIPLE (communication streams call MPI from "
                    "their own threads); use an MPI built with thread support",
                    thread_level_name(provided));

  const Env& e = strata::env();
  init_logging(rank_, world_size_, e);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, e.fault_rank < world_size_,
                    "STRATA_FAULT='{}' names rank {}, which this job of {} rank{} does not have (ranks 0 to {})",
                    e.fault, e.fault_rank, world_size_, world_size_ == 1 ? "" : "s", world_size_ - 1);

  // Every rank must get here before the blocking communicator splits below; the barrier is bounded.
  MPI_Request req;
  STRATA_CHECK_MPI(MPI_Ibarrier(MPI_COMM_WORLD, &req));
  mpi_wait(req, e.timeout_s, "start-up barrier (are all ranks starting Strata?)");
  // The environment every rank must share, agreed before anything below acts on it: the node layout
  // (STRATA_RANKS_PER_NODE), the shared-memory collectives and buffers (STRATA_SHM, STRATA_SHM_IN_PLACE), the trace's
  // gather (STRATA_TRACE), the backend and the communicator. A difference is kMismatch on every rank naming the
  // variable and the ranks, not a timeout in the first collective that one rank runs another way.
  check_config_agreement({{"STRATA_BACKEND", options.backend.empty() ? e.backend : options.backend},
                          {"STRATA_COMM", e.comm},
                          {"STRATA_SHM", e.shm ? "1" : "0"},
                          {"STRATA_SHM_IN_PLACE", e.shm_in_place ? "1" : "0"},
                          {"STRATA_TRACE", e.trace_file.empty() ? "(off)" : e.trace_file},
                          {"STRATA_RANKS_PER_NODE", e.ranks_per_node > 0 ? std::to_string(e.ranks_per_node)
                                                                         : "(the nodes MPI reports)"}});
  MPI_Comm local = MPI_COMM_NULL;
  STRATA_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  STRATA_CHECK_MPI(MPI_Comm_rank(local, &local_rank_));
  STRATA_CHECK_MPI(MPI_Comm_size(local, &local_size_));
  // A node is named by the world rank of its first rank; every rank learns every rank's node.
  int first = rank_;
  STRATA_CHECK_MPI(MPI_Bcast(&first, 1, MPI_INT, 0, local));
  MPI_Comm_free(&local);
  std::vector<int> firsts(static_cast<std::size_t>(world_size_));
  STRATA_CHECK_MPI(MPI_Allgather(&first, 1, MPI_INT, firsts.data(), 1, MPI_INT, MPI_COMM_WORLD));
  std::vector<int> node_of_first(static_cast<std::size_t>(world_size_), -1);
  node_count_ = 0;
  for (int f : firsts) {
    int& node = node_of_first[static_cast<std::size_t>(f)];
    if (node < 0) node = node_count_++;
    node_of_rank_.push_back(node);
  }
  if (e.ranks_per_node > 0) {
    // Virtual nodes (the layouts' view only): the local rank and size, which pick a GPU and size thread pools, stay
    // the machine's.
    const int k = e.ranks_per_node;
    for (int r = 0; r < world_size_; ++r) node_of_rank_[static_cast<std::size_t>(r)] = r / k;
    node_count_ = (world_size_ + k - 1) / k;
  }
  std::string tag = rank_ == 0 ? process_tag() : std::string();
  int tag_len = static_cast<int>(tag.size());
  STRATA_CHECK_MPI(MPI_Bcast(&tag_len, 1, MPI_INT, 0, MPI_COMM_WORLD));
  tag.resize(static_cast<std::size_t>(tag_len));
  STRATA_CHECK_MPI(MPI_Bcast(tag.data(), tag_len, MPI_CHAR, 0, MPI_COMM_WORLD));
  job_id_ = tag;

  ProgressLedger::global().reset();  // this Runtime's operations count from zero on every rank
  side_ = std::make_unique<SideChannel>(e.timeout_s);

  std::string backend = options.backend.empty() ? e.backend : options.backend;
  STRATA_CHECK(backend == "auto" || backend == "cpu" || backend == "cuda", "backend '{}' must be auto, cpu or cuda",
               backend);
  const CommChoice comm = parse_comm_choice(e.comm);
  int gpus = cuda_device_count();
  // NCCL refuses two ranks on one GPU; the staged MPI communicator (STRATA_COMM=mpi) lets ranks share GPU
  // local_rank % gpus.
  const bool gpu_per_rank = needs_gpu_per_rank(comm);
  DeviceKind kind = DeviceKind::kCpu;
  if (backend == "cuda") {
    kind = DeviceKind::kCuda;
    STRATA_CHECK_CODE(ErrorCode::kUnsupported, gpus == 0 || local_size_ <= gpus || !gpu_per_rank, "backend cuda: {}",
                      nccl_gpu_shortage(local_size_, gpus));
  } else if (backend == "auto" && gpus > 0) {
    // auto takes CUDA when every rank on the node can have its own GPU, or when the ranks need not have one.
    if (local_size_ <= gpus || !gpu_per_rank) kind = DeviceKind::kCuda;
    else if (local_rank_ == 0)
      logger("core").warn("{} ranks on this node share {} GPU(s): using the CPU backend (STRATA_BACKEND=auto; "
                          "STRATA_COMM=mpi runs them on the GPU)",
                          local_size_, gpus);
  }
  device_ = create_device(kind, gpus > 0 ? local_rank_ % gpus : 0, e.timeout_s);
  if (e.device_memory) device_->set_memory_budget(e.device_memory);
  CommOptions comm_options = CommOptions::from_env();
  // The shared-memory path hands data over in slices, each waiting for the peer to have copied the last. With more
  // ranks on a node than it has cores a peer is often descheduled and every hand-off waits out a time slice (steps
  // measured 6-11% slower at 4 ranks on 2 cores, 7-20% faster at 2), so such nodes keep MPI's single large copies.
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (comm_options.shm && kind == DeviceKind::kCpu && cores > 0 && local_size_ > cores) {
    comm_options.shm = false;
    logger("comm").info("{} ranks on this node's {} cores: shared-memory collectives off (MPI only)", local_size_,
                        cores);
  }
  std::string why;
  const char* comm_backend = comm_backend_for(kind, comm, &why);
  if (rank_ == 0)
    logger("comm").info("communicator {} ({}{})", comm_backend, why,
                        kind == DeviceKind::kCuda && local_size_ > gpus
                            ? fmt::format("; {} ranks on this node share {} GPU(s)", local_size_, gpus)
                            : std::string());
  world_ = create_communicator(*device_, MPI_COMM_WORLD, "world", comm_options, comm);

  if (!e.trace_file.empty()) {
    try {
      check_trace_file();  // before any work: a trace that cannot be written fails the run now, not at its end
    } catch (...) {
      // Every rank throws here together, towards run_main's abort: leave the streams as ~Runtime does then.
      (void)world_.release();
      (void)device_.release();
      (void)side_.release();
      throw;
    }
    Tracer::global().enable();  // just after that agreement: the ranks' clocks start together
  }
  if (rank_ == 0) logger("core").info("environment: {}", e.describe());
  logger("core").info("{}", describe());
}

Runtime::~Runtime() {
  if (std::uncaught_exceptions() > 0) {
    // Unwinding towards run_main, which will abort the job: finalising MPI here would leave the other ranks
    // waiting, and joining stream threads could wait on a collective that will never finish. Leave both.
    (void)world_.release();
    (void)device_.release();
    (void)side_.release();
    return;
  }
  try {
    device_->compute_stream().synchronize();
    if (!finished_ && Tracer::global().enabled()) write_trace(strata::env().trace_file);
  } catch (const std::exception& ex) {
    // A destructor cannot throw: the error is logged and run_main turns it into exit status 1.
    logger("core").error("at shutdown: {}", ex.what());
    g_shutdown_failed = true;
  }
  world_.reset();
  device_.reset();
  // A bounded final barrier on the side channel: the other ranks learn that this one left (a rank still waiting in
  // a collective this one never issued fails at once), and MPI_Finalize is not entered while a rank is still busy.
  bool all_left = side_->leave();
  side_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_mpi_ && !finalized && all_left) MPI_Finalize();
}

const Env& Runtime::env() const { return strata::env(); }

void Runtime::check_trace_file() {
  std::string error;
  if (rank_ == 0) {  // the rank that writes it
    try {
      check_output_file(strata::env().trace_file, "the trace file (STRATA_TRACE, --trace)", OutputKind::kDirect);
    } catch (const std::exception& ex) {
      error = ex.what();
    }
  }
  all_agree(*world_, error.empty(), error, "checking the trace file " + strata::env().trace_file);
}

void Runtime::finish() {
  if (finished_) return;
  finished_ = true;
  device_->compute_stream().synchronize();
  if (!Tracer::global().enabled()) return;
  std::string error;
  try {
    write_trace(strata::env().trace_file);
  } catch (const std::exception& ex) {
    error = ex.what();
  }
  all_agree(*world_, error.empty(), error, "writing the trace " + strata::env().trace_file);
}

void Runtime::write_trace(const std::string& path) {
  // Every rank's events to rank 0, which writes one Chrome trace (pid = rank). Bounded waits throughout.
  std::string mine = Tracer::global().events_json(rank_);
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<std::size_t>(world_size_)), displs(static_cast<std::size_t>(world_size_));
  MPI_Request req;
  STRATA_CHECK_MPI(MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD, &req));
  mpi_wait(req, strata::env().timeout_s, "gathering the trace");
  std::string all;
  if (rank_ == 0) {
    int total = 0;
    for (int r = 0; r < world_size_; ++r) {
      displs[static_cast<std::size_t>(r)] = total;
      total += lens[static_cast<std::size_t>(r)];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  STRATA_CHECK_MPI(MPI_Igatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
                                MPI_COMM_WORLD, &req));
  mpi_wait(req, strata::env().timeout_s, "gathering the trace");
  if (rank_ != 0) return;
  std::string doc = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  for (int r = 0; r < world_size_; ++r) {
    if (r) doc += ",";
    doc.append(all, static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]),
               static_cast<std::size_t>(lens[static_cast<std::size_t>(r)]));
  }
  doc += "]}\n";
  write_output_file(path, "the trace file (STRATA_TRACE, --trace)", doc);  // every write checked: kIo with errno's text
  logger("core").info("trace of {} ranks written to {} (open in ui.perfetto.dev or chrome://tracing)", world_size_,
                      path);
}

std::string Runtime::describe() const {
  const int virtual_k = strata::env().ranks_per_node;
  return fmt::format("rank {}/{} (local {}/{}, {} node{}{}), backend {}, device {}", rank_, world_size_, local_rank_,
                     local_size_, node_count_, node_count_ == 1 ? "" : "s",
                     virtual_k > 0 ? fmt::format(" of {} ranks by STRATA_RANKS_PER_NODE", virtual_k) : std::string(),
                     device_kind_name(device_->kind()), device_->name());
}

std::unique_ptr<Runtime> init(int* argc, char*** argv, const RuntimeOptions& options) {
  return std::make_unique<Runtime>(argc, argv, options);
}

namespace {

// The one line a failure prints: Error::what() already carries "[rank r/w] file:line:"; other exceptions get the rank
// and what they are here (a bare "std::bad_alloc" says nothing of where).
std::string failure_text(const std::exception* ex) {
  if (ex && dynamic_cast<const Error*>(ex)) return ex->what();
  const std::string what = !ex                                          ? "an exception that is not a std::exception"
                           : dynamic_cast<const std::bad_alloc*>(ex) ? std::string("out of memory (std::bad_alloc: "
                                                                                   "an allocation the system refused)")
                                                                     : std::string(ex->what());
  return fmt::format("[rank {}/{}] {}", process_rank(), process_world_size(), what);
}

}  // namespace

int run_main(const std::function<int()>& body) {
  try {
    const int rc = body();
    return rc == 0 && g_shutdown_failed ? 1 : rc;
  } catch (const std::exception& ex) {
    return fail_job(failure_text(&ex), dynamic_cast<const Error*>(&ex));
  } catch (...) {
    return fail_job(failure_text(nullptr), nullptr);
  }
}

int fail_job(const std::string& text, const Error* error) {
  logger("core").error("fatal: {}", text);
  std::fflush(stdout);
  std::fflush(stderr);
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) {
      // Whichever MPI_Abort comes first ends every process, output unflushed included. A rank that only learned
      // that another failed (kRemote) gives that rank two seconds to print its cause and abort the job itself; the
      // rank with the cause waits a little too, so that the ranks that failed with it (through all_agree, in the
      // same moment) have printed their side before the abort cuts them off.
      const bool remote = error && error->code() == ErrorCode::kRemote;
      std::this_thread::sleep_for(remote ? std::chrono::milliseconds(2000) : std::chrono::milliseconds(300));
      logger("core").error("aborting all {} ranks", size);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  return 1;
}

}  // namespace strata
