// SafetensorsReader and SafetensorsWriter: weight files in the safetensors format (F32, BF16, F16; F64, I32, I64).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/shape_string.h"

namespace strata {

// One tensor of a safetensors file. begin / end are byte offsets from the first byte after the header.
struct TensorInfo {
  std::string name;  // as stored in the file (with a "transformer." prefix if the file has one)
  std::string file;  // the file that holds it: the path opened, or a shard of a sharded model
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint64_t numel() const;  // product of shape (1 for a scalar)
};

// "F32", "BF16", "F16", "F64", "I32", "I64": the safetensors spelling of a DType.
const char* safetensors_dtype_name(DType t);

// Opens a safetensors file and validates its whole header up front: the 8-byte length, the JSON, every entry's
// dtype / shape / data_offsets against the data section, no two tensors overlapping, no name twice. Each problem
// is a strata::Error (kIo) naming the file, the tensor and what is wrong. Tensors may come in any order; bytes the
// header does not cover are ignored. The file stays open for read_f32 (pread: const reads from any thread).
//
// A sharded model opens the same way, as one set of tensors: a Hugging Face model.safetensors.index.json (its
// "weight_map" names each tensor's shard, beside the index), or a model directory (its index when it has one, else
// its model.safetensors). Every shard is validated as a file, and the set as a whole: a shard missing, a tensor the
// index maps to a shard that lacks it, a tensor in two shards, a tensor in a shard that the index does not list,
// a shard name that leaves the directory, each a kIo naming the index, the shard and the tensor. Reads go to the
// shard that holds the tensor, only the bytes asked for.
//
// Name lookup: an exact name wins; otherwise names match when equal after removing one leading "transformer."
// from each, so "h.0.ln_1.weight" finds "transformer.h.0.ln_1.weight" (Hugging Face's GPT-2 checkpoints) and the
// other way round.
class SafetensorsReader {
 public:
  SafetensorsReader() = default;
  explicit SafetensorsReader(const std::string& path) { open(path); }
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&& other) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&& other) noexcept;
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  void open(const std::string& path);  // replaces whatever was open; on error the reader is left closed
  const std::string& path() const { return path_; }  // as opened: a file, an index or a directory
  std::size_t file_count() const { return files_.size(); }

  std::vector<std::string> names() const;  // as stored, in the order of their data (shard by shard)
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // kIo "missing tensor 'x' in file" when absent

  // Elements [element_begin, element_begin + count) of the tensor, converted to f32 (from F32, BF16, F16, F64;
  // I32 / I64 are refused). A range past the tensor's end is kInvalidArgument; a short read (the file shrank
  // since open) is kIo.
  void read_f32(const std::string& name, std::size_t element_begin, std::size_t count, float* out) const;
  std::vector<float> read_f32(const std::string& name) const;  // the whole tensor

  // Throws kIo "tensor 'x' in file has shape [3, 4], expected [4, 4]" (or "missing tensor ...").
  void check_shape(const std::string& name, const std::vector<std::int64_t>& expected) const;

  // Bytes of tensor data read so far by read_f32 (every thread's), from every file of the set.
  std::uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }

  // The "__metadata__" object (a sharded model's: the index's "metadata"); an empty object when there is none.
  const nlohmann::json& metadata() const { return metadata_; }

 private:
  struct File {
    std::string path;
    int fd = -1;
    std::uint64_t data_start = 0;  // 8 + header length
  };
  const TensorInfo* find(const std::string& name) const;
  void close();
  // Opens `path` as one more file of the set; its tensors are appended (sorted by begin within it) and returned by
  // position range [first, tensors_.size()).
  std::size_t open_file(const std::string& path, nlohmann::json* metadata);
  void open_index(const std::string& index_path);

  std::string path_;
  std::vector<File> files_;
  std::vector<std::size_t> file_of_;  // tensors_[i] is in files_[file_of_[i]]
  std::vector<TensorInfo> tensors_;   // file by file, sorted by begin within each
  std::unordered_map<std::string, std::size_t> index_;
  nlohmann::json metadata_ = nlohmann::json::object();
  mutable std::atomic<std::uint64_t> bytes_read_{0};
};

// Collects tensors and writes them as one safetensors file: data in the order added, offsets consecutive, the JSON
// header padded with spaces to a multiple of 8 bytes. The data pointers are kept, not copied: they must stay valid
// until write() returns.
class SafetensorsWriter {
 public:
  // `data` holds numel(shape) f32 values, stored as `dtype` (kF32, kBF16 or kF16; converted round-to-nearest-even).
  void add_f32(const std::string& name, DType dtype, std::vector<std::int64_t> shape, const float* data);
  // `data` holds `bytes` = numel(shape) * dtype_size(dtype) bytes of little-endian elements, stored as they are.
  void add_bytes(const std::string& name, DType dtype, std::vector<std::int64_t> shape, const void* data,
                 std::size_t bytes);
  // A tensor whose bytes the caller writes itself (header() gives where): no data is kept.
  void declare(const std::string& name, DType dtype, std::vector<std::int64_t> shape);
  std::size_t size() const { return entries_.size(); }

  // The file's first bytes, the 8-byte header length and the header padded to a multiple of 8; `offsets` (when not
  // null) receives each tensor's first data byte as an offset from the start of the file, in the order added.
  std::string header(const nlohmann::json& metadata, std::vector<std::uint64_t>* offsets) const;

  // Writes through path + ".tmp" and a rename (a failure leaves `path` as it was). `metadata` (stored as
  // "__metadata__" when not empty) must be an object of strings, as the safetensors format requires.
  void write(const std::string& path, const nlohmann::json& metadata = nlohmann::json::object()) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<std::int64_t> shape;
    std::uint64_t numel;
    const float* f32 = nullptr;   // converted to dtype when written
    const void* bytes = nullptr;  // written as they are
  };
  void add(Entry e);
  std::vector<Entry> entries_;
};

}  // namespace strata
