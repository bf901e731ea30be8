// strata::Runtime: the RAII bootstrap from mpirun (MPI, identity, logging, backend, device, world communicator),
// and run_main, the main wrapper that turns any failure into an abort of the whole job.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/side_channel.h"
#include "core/device.h"
#include "core/env.h"
#include "core/error.h"

namespace strata {

struct RuntimeOptions {
  std::string backend;  // "auto", "cpu" or "cuda"; empty: STRATA_BACKEND
};

// Initialises MPI with MPI_THREAD_MULTIPLE (unless the embedder already did), finds this rank's place (rank,
// world size, local rank on its node, node count), sets up logging, picks the backend (auto: CUDA when a GPU is
// visible for every rank of the node, or for any under STRATA_COMM=mpi) and the device (cuda:local_rank, or
// cuda:local_rank % gpus where ranks share GPUs), and builds the world communicator (STRATA_COMM, logged at start).
// Works without mpirun as a single rank. Destruction tears down in reverse and finalises MPI if it initialised it.
class Runtime {
 public:
  Runtime(int* argc, char*** argv, const RuntimeOptions& options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node_count() const { return node_count_; }
  // Each world rank's node, numbered 0.. in order of the nodes' first ranks (ranks share a node when they share
  // memory: MPI_COMM_TYPE_SHARED).
  const std::vector<int>& node_of_rank() const { return node_of_rank_; }
  DeviceKind backend() const { return device_->kind(); }
  Device& device() const { return *device_; }
  Communicator& world() const { return *world_; }
  MPI_Comm mpi_world() const { return MPI_COMM_WORLD; }
  const Env& env() const;
  // "rank 0/2 (local 0/2, 1 node), backend cpu, device cpu"
  std::string describe() const;
  // This job's name for a file all its ranks write together: rank 0's "host.pid", the same on every rank (a
  // temporary named with it is never shared with another job: core/file_checks.h tmp_path_for).
  const std::string& job_id() const { return job_id_; }
  // Collective, the end of a run: writes the trace (STRATA_TRACE, checked at start-up) on rank 0, agreed over the
  // ranks, so a failed write throws on every rank: kIo naming the file and the system error on rank 0, kRemote on the
  // others. Call it before main returns; the destructor writes the trace otherwise, and a failure there is logged and
  // makes run_main return 1.
  void finish();

 private:
  void write_trace(const std::string& path);
  void check_trace_file();  // collective, at start-up

  bool owns_mpi_ = false;
  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  int node_count_ = 1;
  std::vector<int> node_of_rank_;
  std::string job_id_;
  bool finished_ = false;
  std::unique_ptr<SideChannel> side_;  // made before world_: a rank leaving or stalling is named (side_channel.h)
  std::unique_ptr<Device> device_;
  std::unique_ptr<Communicator> world_;
};

// RAII start of Strata: `auto rt = strata::init(&argc, &argv);`
std::unique_ptr<Runtime> init(int* argc, char*** argv, const RuntimeOptions& options = {});

// Runs `body`; on any exception (std::exception or not) logs it in one line (with the rank) and, when more than one
// rank runs, calls MPI_Abort so no rank is left waiting. Returns body's exit code, or 1 on failure (a Runtime whose
// destructor could not write the trace included). Use as `return strata::run_main(...)`.
int run_main(const std::function<int()>& body);
// run_main's failure path: logs `text`, aborts the job when more ranks run (waiting longer when `error` is kRemote, so
// the rank with the cause prints it first), returns 1.
int fail_job(const std::string& text, const Error* error);

}  // namespace strata
