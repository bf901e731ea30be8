// CheckpointReader: global ranges resolved to the boxes and chunks that hold them, read block by block in file order.
#include "runtime/checkpoint/checkpoint_reader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <tuple>

#include "core/error.h"

namespace strata {

CheckpointReader::CheckpointReader(std::string step_dir, const CheckpointIndex& index, void* staging)
    : dir_(std::move(step_dir)), index_(index), staging_(staging) {}

ChunkReader& CheckpointReader::reader(int file) {
  std::unique_ptr<ChunkReader>& r = readers_[file];
  const FileRecord& f = index_.files[static_cast<std::size_t>(file)];
  if (!r) {
    // Saved where each host has a disk of its own (StorageView), a host holds only its own ranks' files.
    std::error_code ec;
    STRATA_CHECK_CODE(ErrorCode::kIo, std::filesystem::exists(dir_ + "/" + f.name, ec),
                      "cannot open checkpoint file {}/{}: No such file or directory, though the index lists it: it is "
                      "not there as this rank sees it (removed, or written by a host whose disk this rank does not "
                      "see: a checkpoint saved where each host sees only its own directory loads at the layout it was "
                      "saved at, on the same hosts; to load it at another, put the hosts' parts together first: "
                      "strata-ckpt assemble OUT DIR...)",
                      dir_, f.name);
    r = std::make_unique<ChunkReader>(dir_ + "/" + f.name, f.bytes, index_.block_bytes);
  }
  return *r;
}

std::uint64_t CheckpointReader::bytes_read() const {
  std::uint64_t n = 0;
  for (const auto& [file, r] : readers_) n += r->bytes_read();
  return n;
}

const std::vector<CheckpointReader::Box>& CheckpointReader::boxes(const TensorRecord& t) {
  auto it = boxes_.find(&t);
  if (it != boxes_.end()) return it->second;
  std::vector<const ChunkRecord*> sorted;
  for (const ChunkRecord& c : t.chunks) sorted.push_back(&c);
  std::sort(sorted.begin(), sorted.end(),
            [](const ChunkRecord* a, const ChunkRecord* b) { return chunk_before(*a, *b); });
  std::vector<Box> out;
  for (const ChunkRecord* c : sorted) {
    if (out.empty() || out.back().first->box_offset != c->box_offset || out.back().first->box_shape != c->box_shape) {
      Box b;
      b.first = c;
      const std::size_t dims = t.shape.size();
      b.strides.assign(dims, 1);
      for (std::size_t d = dims; d-- > 1;)
        b.strides[d - 1] = b.strides[d] * static_cast<std::uint64_t>(c->box_shape[d]);
      for (std::size_t d = 0; d < dims; ++d)
        if (c->box_shape[d] != t.shape[d]) b.partial_dim = static_cast<int>(d);
      out.push_back(std::move(b));
    }
    out.back().chunks.push_back(c);
  }
  return boxes_.emplace(&t, std::move(out)).first->second;
}

void CheckpointReader::resolve(const TensorRecord& t, std::uint64_t begin, std::uint64_t count, float* out,
                               std::vector<Piece>& pieces) {
  const std::vector<Box>& bx = boxes(t);
  const std::size_t dims = t.shape.size();
  std::vector<std::uint64_t> strides(dims, 1);  // of the tensor
  for (std::size_t d = dims; d-- > 1;) strides[d - 1] = strides[d] * static_cast<std::uint64_t>(t.shape[d]);
  std::vector<std::int64_t> idx(dims);
  const std::uint64_t end = begin + count;
  auto missing = [&](std::uint64_t from, std::uint64_t to) {
    STRATA_THROW(ErrorCode::kIo, "{}: no chunk holds elements [{}, {}) of tensor '{}'", dir_, from, to, t.name);
  };
  std::uint64_t at = begin;
  while (at < end) {
    for (std::size_t d = 0; d < dims; ++d)
      idx[d] = static_cast<std::int64_t>(d == 0 ? at / strides[0]
                                                : at / strides[d] % static_cast<std::uint64_t>(t.shape[d]));
    // The box holding element `at` (a tensor has a few: one per tp slice and part), and how far the elements from
    // `at` run on inside it in the tensor's row-major order: to the end of its row along its last partial dimension.
    const Box* box = nullptr;
    for (const Box& b : bx) {
      bool inside = dims > 0 || at == 0;
      for (std::size_t d = 0; d < dims && inside; ++d)
        inside = idx[d] >= b.first->box_offset[d] && idx[d] < b.first->box_offset[d] + b.first->box_shape[d];
      if (inside) {
        box = &b;
        break;
      }
    }
    if (!box) missing(at, end);
    std::uint64_t run = t.numel() - at;
    if (box->partial_dim >= 0) {
      const std::size_t k = static_cast<std::size_t>(box->partial_dim);
      std::uint64_t rest = 0;  // the position inside the row of dimension k
      for (std::size_t d = k + 1; d < dims; ++d) rest += static_cast<std::uint64_t>(idx[d]) * strides[d];
      const std::int64_t row_end = box->first->box_offset[k] + box->first->box_shape[k];
      run = static_cast<std::uint64_t>(row_end - idx[k]) * strides[k] - rest;
    }
    const std::uint64_t m = std::min(run, end - at);
    std::uint64_t flat = 0;  // of `at` in the box
    for (std::size_t d = 0; d < dims; ++d)
      flat += static_cast<std::uint64_t>(idx[d] - box->first->box_offset[d]) * box->strides[d];
    // The box's chunks that overlap box elements [flat, flat + m).
    const std::vector<const ChunkRecord*>& cs = box->chunks;
    auto it = std::upper_bound(cs.begin(), cs.end(), flat,
                               [](std::uint64_t v, const ChunkRecord* c) { return v < c->begin; });
    if (it != cs.begin()) --it;
    std::uint64_t pos = flat;
    for (; pos < flat + m && it != cs.end(); ++it) {
      const ChunkRecord& c = **it;
      if (c.begin + c.count <= pos) continue;
      if (c.begin > pos) missing(at + (pos - flat), at + (std::min(c.begin, flat + m) - flat));
      const std::uint64_t n = std::min(flat + m, c.begin + c.count) - pos;
      pieces.push_back(Piece{&c, pos - c.begin, n, out + (at + (pos - flat) - begin)});
      pos += n;
    }
    if (pos < flat + m) missing(at + (pos - flat), at + m);
    at += m;
  }
}

void CheckpointReader::copy_bytes(const ChunkRecord& chunk, const std::string& tensor, std::size_t esz,
                                  std::uint64_t lo, std::uint64_t bytes, char* dst) {
  const std::uint64_t bb = index_.block_bytes, hi = lo + bytes;
  while (lo < hi) {
    const std::uint64_t block = lo / bb, block_lo = block * bb;
    if (staged_chunk_ != &chunk || staged_block_ != block) {
      staged_chunk_ = nullptr;  // until the read below has succeeded
      staged_len_ = reader(chunk.file).read_block(chunk, tensor, esz, block, staging_);
      staged_chunk_ = &chunk;
      staged_block_ = block;
    }
    const std::uint64_t take = std::min<std::uint64_t>(hi, block_lo + staged_len_) - lo;
    std::memcpy(dst, static_cast<const char*>(staging_) + (lo - block_lo), take);
    dst += take;
    lo += take;
  }
}

void CheckpointReader::read_f32(const TensorRecord& t, std::uint64_t begin, std::uint64_t count, float* out) {
  read_f32(t, std::vector<Run>{Run{begin, count, out}});
}

void CheckpointReader::read_f32(const TensorRecord& t, const std::vector<Run>& runs) {
  std::vector<Piece> pieces;
  for (const Run& r : runs) resolve(t, r.begin, r.count, r.out, pieces);
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
    return std::tie(a.chunk->file, a.chunk->offset, a.first) < std::tie(b.chunk->file, b.chunk->offset, b.first);
  });
  const std::size_t esz = dtype_size(t.dtype);
  std::vector<std::uint16_t> half;  // bf16 / f16 values on their way to f32, a bounded piece at a time
  constexpr std::uint64_t kPiece = 1 << 16;
  for (const Piece& p : pieces) {
    if (t.dtype == DType::kF32) {
      copy_bytes(*p.chunk, t.name, esz, p.first * esz, p.count * esz, reinterpret_cast<char*>(p.out));
      continue;
    }
    half.resize(std::min(p.count, kPiece));
    for (std::uint64_t done = 0; done < p.count; done += kPiece) {
      const std::uint64_t m = std::min(kPiece, p.count - done);
      copy_bytes(*p.chunk, t.name, esz, (p.first + done) * esz, m * esz, reinterpret_cast<char*>(half.data()));
      for (std::uint64_t i = 0; i < m; ++i)
        p.out[done + i] = t.dtype == DType::kBF16 ? bf16_to_f32(half[i]) : f16_to_f32(half[i]);
    }
  }
}

}  // namespace strata
