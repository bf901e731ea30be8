// CheckpointReader: element ranges of a committed checkpoint's tensors, read from only the chunks that overlap them
// through one bounded staging block (whole blocks, each checksummed), whatever layout wrote them. Checkpointer::load
// and strata-ckpt read through it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "runtime/checkpoint/checkpoint_index.h"
#include "runtime/checkpoint/chunk_file.h"

namespace strata {

class CheckpointReader {
 public:
  // `step_dir` holds the index's files; `staging` is index.block_bytes of host memory the reader reads blocks into
  // (the caller owns it, so it can sit in a ledger). Data files open on first use.
  CheckpointReader(std::string step_dir, const CheckpointIndex& index, void* staging);

  // Elements [begin, begin + count) of `tensor`, as f32 (f32 tensors as stored; bf16 / f16 converted), into host
  // memory at `out`. kIo naming the file, the tensor and the block for a corrupt or short file, and naming the
  // elements when no chunk holds them; kUnsupported for a tensor saved in boxes smaller than the tensor.
  void read_f32(const TensorRecord& tensor, std::uint64_t begin, std::uint64_t count, float* out);
  std::uint64_t bytes_read() const;  // from every file so far (whole blocks)
  const std::string& dir() const { return dir_; }

 private:
  ChunkReader& reader(int file);

  std::string dir_;
  const CheckpointIndex& index_;
  void* staging_;
  std::map<int, std::unique_ptr<ChunkReader>> readers_;
};

}  // namespace strata
