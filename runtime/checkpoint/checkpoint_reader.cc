// CheckpointReader: the chunks that overlap a range, read block by block.
#include "runtime/checkpoint/checkpoint_reader.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace strata {

CheckpointReader::CheckpointReader(std::string step_dir, const CheckpointIndex& index, void* staging)
    : dir_(std::move(step_dir)), index_(index), staging_(staging) {}

ChunkReader& CheckpointReader::reader(int file) {
  std::unique_ptr<ChunkReader>& r = readers_[file];
  const FileRecord& f = index_.files[static_cast<std::size_t>(file)];
  if (!r) r = std::make_unique<ChunkReader>(dir_ + "/" + f.name, f.bytes, index_.block_bytes);
  return *r;
}

std::uint64_t CheckpointReader::bytes_read() const {
  std::uint64_t n = 0;
  for (const auto& [file, r] : readers_) n += r->bytes_read();
  return n;
}

void CheckpointReader::read_f32(const TensorRecord& t, std::uint64_t begin, std::uint64_t count, float* out) {
  const std::size_t esz = dtype_size(t.dtype);
  std::vector<std::uint16_t> half;  // bf16 / f16 values on their way to f32
  auto it = std::upper_bound(t.chunks.begin(), t.chunks.end(), begin,
                             [](std::uint64_t v, const ChunkRecord& c) { return v < c.begin; });
  if (it != t.chunks.begin()) --it;
  std::uint64_t at = begin;
  for (; at < begin + count && it != t.chunks.end(); ++it) {
    STRATA_CHECK_CODE(ErrorCode::kUnsupported, it->whole_box(t.shape),
                      "{}: tensor '{}' is saved in slices of a box (tensor parallelism), which this version does not "
                      "read",
                      dir_, t.name);
    if (it->begin + it->count <= at) continue;
    STRATA_CHECK_CODE(ErrorCode::kIo, it->begin <= at, "{}: no chunk holds elements [{}, {}) of tensor '{}'", dir_, at,
                      it->begin, t.name);
    const std::uint64_t n = std::min(begin + count, it->begin + it->count) - at;
    float* dst = out + (at - begin);
    if (t.dtype == DType::kF32) {
      reader(it->file).read(*it, t.name, esz, at, n, dst, staging_);
    } else {  // a bounded piece at a time
      constexpr std::uint64_t kPiece = 1 << 16;
      half.resize(std::min(n, kPiece));
      for (std::uint64_t done = 0; done < n; done += kPiece) {
        const std::uint64_t m = std::min(kPiece, n - done);
        reader(it->file).read(*it, t.name, esz, at + done, m, half.data(), staging_);
        for (std::uint64_t i = 0; i < m; ++i)
          dst[done + i] = t.dtype == DType::kBF16 ? bf16_to_f32(half[i]) : f16_to_f32(half[i]);
      }
    }
    at += n;
  }
  STRATA_CHECK_CODE(ErrorCode::kIo, at == begin + count, "{}: no chunk holds elements [{}, {}) of tensor '{}'", dir_,
                    at, begin + count, t.name);
}

}  // namespace strata
