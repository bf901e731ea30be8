// Checkpointer: sharded, atomic checkpoints of a ShardedModel and its optimizer (any OptimizerState: ShardedAdamW, or
// a trainer's own) that load at any layout (docs/checkpoint.md). Each rank writes the f32 master and the optimizer's
// per-element state (AdamW's moments) of the shard it owns into a file of its own,
// as runs of the global tensors (a tensor-parallel slice as boxes of them); all ranks agree; rank 0 merges the index,
// and the first rank of each storage group (StorageView: one on a shared file system, one per host where each has its
// own disk) writes it and the commit marker, renames the directory and updates `latest`. A load reads only the byte
// ranges that overlap this rank's shards, through one bounded staging block, at any number of ranks, tensor-parallel
// degree, ZeRO stage, hybrid layout, offload policy or parameter dtype.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "core/dir_lock.h"
#include "runtime/checkpoint/checkpoint_dir.h"
#include "runtime/checkpoint/storage_view.h"
#include "runtime/optim/optimizer_state.h"
#include "runtime/parallel/device_mesh.h"
#include "runtime/sharding/sharded_model.h"

namespace strata {

struct CheckpointOptions {
  std::string dir;
  int keep = 2;                       // committed checkpoints kept; older ones go after a newer one commits
  bool async = false;                 // write in a background thread while training goes on (poll() commits)
  std::size_t block_bytes = 1 << 20;  // checksum granularity, and the staging block a load reads through
  void validate() const;
};

// One save, as measured on this rank.
struct SaveStats {
  std::int64_t step = -1;
  double stall_ms = 0;       // the caller's time in save() (async: the copy to host staging) and in the commit
  double write_ms = 0;       // writing and fsyncing this rank's file (async: in the background)
  std::uint64_t bytes = 0;   // this rank's file
  bool committed = false;
};

// One load, as measured on this rank.
struct LoadStats {
  std::int64_t step = -1;
  double ms = 0;             // the whole load, the parameters' publication included
  std::uint64_t bytes = 0;   // bytes this rank read from the checkpoint's files (whole checksummed blocks)
};

// Pipeline parallelism: a rank's model is one part of a whole. A checkpoint always holds the whole model (so it loads at
// any pp degree): the index declares `whole` (units as declared, tp slices and all), and this rank saves its units
// except `copies` (a copy of units another stage saves: the LM head tied to the embeddings), which it loads by name.
struct CheckpointPart {
  std::vector<UnitSpec> whole;
  std::vector<int> copies;
  int pp = 1;  // pipeline stages, for the record
};

class Checkpointer {
 public:
  // Collective. `world` is the communicator every rank of the job is in (the commit is agreed over it). A model without
  // tensor parallelism (no slot split: SlotSpec::tp). Every rank creates the directory; which ranks see the same files
  // there is probed (probe_storage), and each storage group's first rank takes its lock (DIR/.lock, core/dir_lock.h)
  // for the Checkpointer's life: a directory another live job owns is kIo on every rank, naming that job (with
  // several groups, kIo on the leader that found it and kRemote naming it on the others); a lock a dead job left is
  // taken over with a warning.
  Checkpointer(ShardedModel& model, OptimizerState& optimizer, Communicator& world, CheckpointOptions options);
  // Over a mesh: its world, and its tp group, whose rank says which slice of each split slot this rank holds.
  // kInvalidArgument when a split slot's shape is not its slice at the mesh's tp degree.
  Checkpointer(ShardedModel& model, OptimizerState& optimizer, DeviceMesh& mesh, CheckpointOptions options);
  // Over a mesh, for one part of a pipeline (CheckpointPart).
  Checkpointer(ShardedModel& model, OptimizerState& optimizer, DeviceMesh& mesh, CheckpointOptions options,
               CheckpointPart part);
  // Joins the background writer of a save in flight (it is not committed: call wait() before); never throws.
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective, at a step boundary (after the optimizer's step): saves the state as checkpoint `step` (the trainer's
  // step count: its directory's number), with `trainer_state` (a JSON object: the trainer's data position, schedule,
  // configuration) stored beside it.
  // Synchronous: returns once committed. Asynchronous: copies the state to host staging and returns; the previous
  // save in flight is finished first.
  void save(std::int64_t step, const nlohmann::json& trainer_state);
  // Collective, once per step while an asynchronous save is in flight: commits it when every rank has written.
  void poll();
  // Collective: finishes and commits the save in flight, if any.
  void wait();
  const SaveStats& last_save() const { return last_; }
  const LoadStats& last_load() const { return last_load_; }

  // Collective: loads `step` (-1: the latest committed) into the model and the optimizer, and returns the trainer
  // state saved with it. Refuses, on every rank, a checkpoint of another model, of another optimizer's state (kind
  // and tensors named, both sides), or a corrupt one. A checkpoint of weights alone (strata-ckpt import, no optimizer
  // state, step 0) starts any optimizer from zeros.
  nlohmann::json load(std::int64_t step = -1);
  // The latest committed step in the directory, or -1 (reads files only: every rank sees the same).
  std::int64_t latest_step() const { return dir_.latest_step(); }

 private:
  Checkpointer(ShardedModel& model, OptimizerState& optimizer, Communicator& world, int tp_rank, int tp_size,
               CheckpointOptions options);
  struct Staged;  // one save's host copy of this rank's chunks, and its chunk records
  std::unique_ptr<Staged> stage(std::int64_t step);
  void write(Staged& s);  // the file of this rank; on the caller's thread or the background one
  void commit(Staged& s);  // collective: agree, then rank 0 writes the index and renames
  // Collective; throws on every rank if any failed. `intact_note`: a save says which checkpoint is still intact.
  void agree(bool ok, const std::string& error, const std::string& what, bool intact_note);

  ShardedModel& model_;
  OptimizerState& optimizer_;
  Communicator& world_;
  int tp_rank_ = 0;  // this rank's place in its tensor-parallel group, and the group's size
  int tp_size_ = 1;
  CheckpointOptions options_;
  CheckpointPart part_;  // whole: the model's own declaration unless a pipeline part says otherwise
  CheckpointDir dir_;
  StorageView storage_;  // which ranks see the same files in the directory; each group's first commits there
  DirLock lock_;         // each storage group's first rank: the directory is this job's
  std::unique_ptr<Device> staging_device_;  // host memory for staging, with its own ledger
  std::unique_ptr<Staged> in_flight_;
  std::thread writer_;
  std::atomic<bool> written_{false};
  SaveStats last_;
  LoadStats last_load_;
};

}  // namespace strata
