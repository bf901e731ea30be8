// CheckpointIndex: the index of one checkpoint (docs/checkpoint.md): the format version, the model's declaration,
// the per-rank data files, and for every saved tensor its global shape, dtype and the chunks that hold it, with
// block checksums; plus the run's scalar state. Parsing validates everything, so a corrupt or foreign index is a
// clear error before any data is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "runtime/sharding/state_memory.h"

namespace strata {

constexpr int kCheckpointFormatVersion = 1;
constexpr const char* kCheckpointFormatName = "strata-checkpoint";

// A run of a tensor's elements stored in one file. The chunk belongs to a box of the global tensor (the whole tensor,
// or a tensor-parallel rank's slice of it: docs/checkpoint.md, "Tensor-parallel slices") and holds elements
// [begin, begin + count) of that box in row-major order, as `count` little-endian values of the tensor's dtype at
// byte `offset` of the file. `crc32` holds one CRC-32 (zlib's) per block of `block_bytes` of those bytes, the last
// block possibly short, so a reader that needs part of a chunk verifies only the blocks it reads.
struct ChunkRecord {
  int file = 0;  // index into CheckpointIndex::files
  std::uint64_t offset = 0;
  std::vector<std::int64_t> box_offset;  // per dimension; all 0 for the whole tensor
  std::vector<std::int64_t> box_shape;   // per dimension; the tensor's shape for the whole tensor
  std::uint64_t begin = 0;
  std::uint64_t count = 0;
  std::vector<std::uint32_t> crc32;
  bool whole_box(const std::vector<std::int64_t>& shape) const;  // the box is the whole tensor
};

struct TensorRecord {
  std::string name;  // "params/<slot>", "exp_avg/<slot>", "exp_avg_sq/<slot>"
  std::vector<std::int64_t> shape;
  DType dtype = DType::kF32;
  std::vector<ChunkRecord> chunks;  // sorted by (box_offset, box_shape, begin) after parse()
  std::uint64_t numel() const;
};

struct FileRecord {
  std::string name;  // relative to the checkpoint's directory: "rank-00003.bin"
  std::uint64_t bytes = 0;
};

struct CheckpointIndex {
  int version = kCheckpointFormatVersion;
  std::int64_t step = 0;
  int world_size = 1;
  nlohmann::json layout = nlohmann::json::object();  // the mesh, ZeRO stage, dtypes and offload it was saved from
  std::vector<UnitSpec> units;                       // the model's declaration
  std::uint64_t block_bytes = 1 << 20;
  std::vector<FileRecord> files;
  std::map<std::string, TensorRecord> tensors;
  nlohmann::json state = nlohmann::json::object();   // optimizer scalars, the trainer's position, its configuration
  // What parse() found beside the fields: whether the index carried its own checksum (every index written since
  // Hardening 2 does; older ones load unchecked, with a warning), and the paths of fields this version does not know.
  bool checksummed = false;
  std::vector<std::string> unknown_fields;

  nlohmann::json to_json() const;
  // to_json().dump(1) with the index's own checksum as its last field: "index_crc32", the CRC-32 of every byte before.
  std::string serialize() const;
  // Parses and validates an index (`where` names it in errors: "DIR/step-00000010/index.json"). kIo for anything
  // wrong: not JSON, another format, a newer version ("written by a newer Strata"), a checksum that does not match,
  // a field missing, of the wrong type or out of range (the schema check names its JSON path), a dtype or shape that
  // is not one, a chunk outside its box, file or tensor, checksums that do not match the chunk's length, chunks that
  // overlap (in one box, or through boxes that intersect). Never reads past its input or trusts a size.
  static CheckpointIndex parse(const std::string& text, const std::string& where);

  const TensorRecord& tensor(const std::string& name) const;  // kIo "... has no tensor 'x'"
  bool has_tensor(const std::string& name) const { return tensors.count(name) != 0; }
  // kMismatch naming the first difference when `declared` is not the model this checkpoint holds.
  void check_model(const std::vector<UnitSpec>& declared, const std::string& where) const;
  // "" when every element of every tensor is in exactly one chunk, else a message naming the first gap or overlap.
  // Boxes that intersect count as an overlap, so exact coverage is: the boxes tile the tensor, and each box's chunks
  // tile the box.
  std::string coverage_problem() const;
};

// The declaration a checkpoint holds: every tensor-parallel slot (SlotSpec::tp) at its global shape, its split
// cleared, so that a model declares the same at every tp degree.
std::vector<UnitSpec> global_declaration(const std::vector<UnitSpec>& units);

// The order parse() leaves a tensor's chunks in: by box (offset, then shape), then by begin.
bool chunk_before(const ChunkRecord& a, const ChunkRecord& b);

// The tensors a model's slot is saved as: its parameters, and each per-element tensor of the optimizer's state
// (OptimizerState::tensor_names) as "<tensor>/<slot>" (AdamW's exp_avg and exp_avg_sq below).
std::string params_tensor(const std::string& slot);
std::string optimizer_tensor(const std::string& tensor, const std::string& slot);
std::string exp_avg_tensor(const std::string& slot);
std::string exp_avg_sq_tensor(const std::string& slot);

// The per-element tensors of the optimizer state a checkpoint records (state.optimizer): its "tensors", or AdamW's
// two for an index written before optimizers other than AdamW were saved, or without an optimizer (an import, whose
// trainable slots then have none of them).
std::vector<std::string> saved_optimizer_tensors(const nlohmann::json& optimizer);
// Its kind ("adamw" for such an older index), or "" without one.
std::string saved_optimizer_kind(const nlohmann::json& optimizer);

}  // namespace strata
