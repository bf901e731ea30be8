// CheckpointDir: the layout of a checkpoint directory (docs/checkpoint.md):
//   DIR/latest                  the name of the newest committed checkpoint ("step-00000010"), replaced atomically
//   DIR/step-00000010/          a committed checkpoint: index.json, COMMITTED, rank-NNNNN.bin data files
//   DIR/step-00000020.tmp/      a checkpoint being written (or left by a crash; never loaded, removed later)
// A checkpoint is committed when its directory has its final name and holds COMMITTED and index.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint_index.h"

namespace strata {

// What a resume finds in a checkpoint directory (CheckpointDir::resume_plan): the checkpoint it loads, what newer than
// that it passes over, or why it cannot resume at all (docs/checkpoint.md, "When the directory is not what a resume
// expects").
struct ResumePlan {
  std::int64_t step = -1;          // the checkpoint to load; -1: start from step 0
  std::vector<std::string> notes;  // sentences for a warning: newer checkpoints not loaded, interrupted saves
  std::string refusal;             // non-empty: resuming here would silently differ from what was asked; the reason
};

class CheckpointDir {
 public:
  explicit CheckpointDir(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  static std::string step_name(std::int64_t step);     // "step-00000010"
  std::string step_path(std::int64_t step) const;      // DIR/step-00000010
  std::string tmp_path(std::int64_t step) const;       // DIR/step-00000010.tmp
  static std::string rank_file(int rank);              // "rank-00003.bin"
  // The step a directory name stands for: "step-00000010" (tmp false) or "step-00000010.tmp" (tmp true); else -1.
  static std::int64_t parse_step_name(const std::string& name, bool tmp);

  // Committed steps, ascending (directories that are complete: their final name, COMMITTED and index.json).
  std::vector<std::int64_t> committed_steps() const;
  // Steps with a `.tmp` directory (a save in progress, or one a crash interrupted), ascending.
  std::vector<std::int64_t> incomplete_steps() const;
  // The step `latest` names when it is committed, else the newest committed one; -1 when there is none.
  std::int64_t latest_step() const;
  // What `latest` names ("step-00000020"), "" when there is no such file.
  std::string latest_name() const;
  // What a resume does here: load latest_step(), naming what it passes over (a `latest` that names something not
  // committed, newer directories without their marker, saves a crash interrupted, committed checkpoints newer than the
  // one `latest` names); start from 0 when the directory holds nothing (a new run) or only interrupted saves; refuse
  // when it holds step directories but nothing committed (they are damaged, or were never finished).
  ResumePlan resume_plan() const;
  // Whether the directory holds anything of a checkpoint run: committed or damaged steps, .tmp saves, `latest`.
  bool holds_checkpoints() const;
  // The index of a committed step, parsed and validated; kIo naming the file when it is missing or bad.
  CheckpointIndex read_index(std::int64_t step) const;

  // Creates DIR (and parents) if needed; kIo naming it.
  void create() const;
  // Commits step-N.tmp, whose data files are written and flushed: writes `index` and the COMMITTED marker into it
  // (each flushed), flushes the directory, renames it to step-N (replacing a checkpoint of the same step), flushes
  // DIR, and points `latest` at it. A crash before the rename leaves only a .tmp directory, which is never loaded.
  void commit(const CheckpointIndex& index) const;
  // Removes `.tmp` directories (a crashed or abandoned save), step directories that are not committed (damaged, or
  // a removal that stopped half-way) and all but the newest `keep` committed checkpoints.
  // Only ever removes what is older than `newest`, so the checkpoint just committed is never touched.
  void prune(int keep, std::int64_t newest) const;

 private:
  std::string path_;
};

}  // namespace strata
