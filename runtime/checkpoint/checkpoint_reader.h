// CheckpointReader: element ranges of a committed checkpoint's global tensors, read from only the chunks that overlap
// them through one bounded staging block (whole blocks, each checksummed), whatever layout wrote them: any rank
// count, and any tensor-parallel degree (a range may cross the boxes of several tp slices). Checkpointer::load and
// strata-ckpt read through it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint_index.h"
#include "runtime/checkpoint/chunk_file.h"

namespace strata {

class CheckpointReader {
 public:
  // `step_dir` holds the index's files; `staging` is index.block_bytes of host memory the reader reads blocks into
  // (the caller owns it, so it can sit in a ledger). Data files open on first use.
  CheckpointReader(std::string step_dir, const CheckpointIndex& index, void* staging);

  // Global elements [begin, begin + count) (row-major, the tensor's shape) into host memory at `out`.
  struct Run {
    std::uint64_t begin = 0;
    std::uint64_t count = 0;
    float* out = nullptr;
  };
  // Elements [begin, begin + count) of `tensor`, as f32 (f32 tensors as stored; bf16 / f16 converted), into host
  // memory at `out`. kIo naming the file, the tensor and the block for a corrupt or short file, and naming the
  // elements when no chunk holds them.
  void read_f32(const TensorRecord& tensor, std::uint64_t begin, std::uint64_t count, float* out);
  // Several runs of one tensor: the parts of chunks they need are read in file order, so a block is read once
  // however the runs interleave the saver's boxes (a tp slice loaded at another degree reads a row of each box in
  // turn). Runs are independent: they may come in any order.
  void read_f32(const TensorRecord& tensor, const std::vector<Run>& runs);
  std::uint64_t bytes_read() const;  // from every file so far (whole blocks)
  const std::string& dir() const { return dir_; }

 private:
  // One box of a tensor: its chunks, sorted by begin.
  struct Box {
    const ChunkRecord* first = nullptr;  // for the box's offset and shape
    std::vector<const ChunkRecord*> chunks;
    int partial_dim = -1;                // the last dimension the box does not span whole; -1: the whole tensor
    std::vector<std::uint64_t> strides;  // row-major strides of the box
  };
  // Elements [first, first + count) of `chunk`, for `out`.
  struct Piece {
    const ChunkRecord* chunk = nullptr;
    std::uint64_t first = 0;
    std::uint64_t count = 0;
    float* out = nullptr;
  };
  ChunkReader& reader(int file);
  const std::vector<Box>& boxes(const TensorRecord& t);
  // Appends the pieces of chunks that hold global elements [begin, begin + count) of `t`; kIo for elements no chunk
  // holds.
  void resolve(const TensorRecord& t, std::uint64_t begin, std::uint64_t count, float* out, std::vector<Piece>& pieces);
  // Bytes [lo, lo + bytes) of `chunk` into `dst`, block by block through the staging block.
  void copy_bytes(const ChunkRecord& chunk, const std::string& tensor, std::size_t esz, std::uint64_t lo,
                  std::uint64_t bytes, char* dst);

  std::string dir_;
  const CheckpointIndex& index_;
  void* staging_;
  std::map<int, std::unique_ptr<ChunkReader>> readers_;
  std::map<const TensorRecord*, std::vector<Box>> boxes_;
  // The block the staging holds now (a run of pieces in file order often needs it again).
  const ChunkRecord* staged_chunk_ = nullptr;
  std::uint64_t staged_block_ = 0;
  std::size_t staged_len_ = 0;
};

}  // namespace strata
