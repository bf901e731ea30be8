// Checkpoint data files: appends with block checksums, verified range reads, fsync, atomic small files.
#include "runtime/checkpoint/chunk_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/env.h"
#include "core/error.h"
#include "core/fd_io.h"
#include "core/file_checks.h"

namespace strata {
namespace {

std::string system_error(int err) { return std::strerror(err); }

// STRATA_FAULT's checkpoint faults: "checkpoint-kill:R[:K]" or "checkpoint-enospc:R[:K]" strike rank R in the K-th
// data file (".bin") it writes (default the first).
bool fault_here(const char* kind, const std::string& path, int files_written) {
  const std::string& f = env().fault;
  const std::string prefix = std::string(kind) + ":";
  if (f.rfind(prefix, 0) != 0 || path.size() < 4 || path.compare(path.size() - 4, 4, ".bin") != 0) return false;
  int rank = -1, nth = 1;
  if (std::sscanf(f.c_str() + prefix.size(), "%d:%d", &rank, &nth) < 1) return false;
  return rank == process_rank() && files_written == nth;
}

int g_data_files = 0;  // data files this process has started writing

}  // namespace

std::uint32_t crc32_of(const void* data, std::size_t bytes) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const Bytef* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {
    const uInt n = static_cast<uInt>(std::min<std::size_t>(bytes, 1u << 30));
    crc = ::crc32(crc, p, n);
    p += n;
    bytes -= n;
  }
  return static_cast<std::uint32_t>(crc);
}

std::vector<std::uint32_t> block_crc32(const void* data, std::size_t bytes, std::size_t block_bytes) {
  std::vector<std::uint32_t> out;
  for (std::size_t at = 0; at < bytes; at += block_bytes)
    out.push_back(crc32_of(static_cast<const char*>(data) + at, std::min(block_bytes, bytes - at)));
  return out;
}

// ---- ChunkWriter ------------------------------------------------------------------------------------------------

ChunkWriter::ChunkWriter(std::string path, std::size_t block_bytes) : path_(std::move(path)), block_bytes_(block_bytes) {
  if (path_.size() >= 4 && path_.compare(path_.size() - 4, 4, ".bin") == 0) nth_file_ = ++g_data_files;
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  STRATA_CHECK_CODE(ErrorCode::kIo, fd_ >= 0, "cannot create {}: {}", path_, system_error(errno));
}

ChunkWriter::~ChunkWriter() {
  if (fd_ >= 0) ::close(fd_);
}

std::uint64_t ChunkWriter::append(const void* data, std::size_t bytes, std::vector<std::uint32_t>& crc32) {
  STRATA_CHECK(fd_ >= 0, "{} is already finished", path_);
  if (fault_here("checkpoint-enospc", path_, nth_file_))
    STRATA_THROW(ErrorCode::kIo, "cannot write {}: {} (injected by STRATA_FAULT)", path_, system_error(ENOSPC));
  const std::uint64_t at = written_;
  // The kill fault: half of this chunk reaches the file, then the process dies as under kill -9.
  if (fault_here("checkpoint-kill", path_, nth_file_) && bytes > 1) {
    write_all(fd_, data, bytes / 2, path_);
    ::kill(::getpid(), SIGKILL);
  }
  write_all(fd_, data, bytes, path_);
  crc32 = block_crc32(data, bytes, block_bytes_);
  written_ += bytes;
  return at;
}

void ChunkWriter::finish() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  const bool synced = ::fsync(fd) == 0;
  const int err = errno;
  const bool closed = ::close(fd) == 0;
  STRATA_CHECK_CODE(ErrorCode::kIo, synced && closed, "cannot flush {} to disk: {}", path_,
                    system_error(synced ? errno : err));
}

// ---- ChunkReader ------------------------------------------------------------------------------------------------

ChunkReader::ChunkReader(std::string path, std::uint64_t expected_bytes, std::size_t block_bytes)
    : path_(std::move(path)), block_bytes_(block_bytes) {
  std::string problem;  // a FIFO or device is refused before it can block
  fd_ = try_open_input_file(path_, "checkpoint file", problem);
  STRATA_CHECK_CODE(ErrorCode::kIo, fd_ >= 0, "{}", problem);
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < expected_bytes) {
    const std::uint64_t size = static_cast<std::uint64_t>(st.st_size);
    ::close(fd_);
    fd_ = -1;
    STRATA_THROW(ErrorCode::kIo, "checkpoint file {} has {} bytes, the index says {}: it is truncated", path_, size,
                 expected_bytes);
  }
}

ChunkReader::~ChunkReader() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t ChunkReader::read_block(const ChunkRecord& chunk, const std::string& tensor, std::size_t esz,
                                    std::uint64_t block, void* staging) const {
  const std::uint64_t chunk_bytes = chunk.count * esz, lo = block * block_bytes_;
  const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(block_bytes_, chunk_bytes - lo));
  pread_all(fd_, staging, len, chunk.offset + lo, path_);
  bytes_read_ += len;
  const std::uint32_t crc = crc32_of(staging, len);
  STRATA_CHECK_CODE(ErrorCode::kIo, block < chunk.crc32.size() && crc == chunk.crc32[block],
                    "checkpoint file {} is corrupt: tensor '{}', block {} (bytes {}..{}) has checksum {:08x}, the "
                    "index says {:08x}",
                    path_, tensor, block, chunk.offset + lo, chunk.offset + lo + len, crc,
                    block < chunk.crc32.size() ? chunk.crc32[block] : 0);
  return len;
}

void ChunkReader::read(const ChunkRecord& chunk, const std::string& tensor, std::size_t esz, std::uint64_t begin,
                       std::uint64_t count, void* out, void* staging) const {
  STRATA_CHECK(begin >= chunk.begin && count <= chunk.count && begin - chunk.begin <= chunk.count - count,
               "elements [{}, {}) of '{}' are not in the chunk [{}, {})", begin, begin + count, tensor, chunk.begin,
               chunk.begin + chunk.count);
  std::uint64_t lo = (begin - chunk.begin) * esz;  // bytes wanted, relative to the chunk
  const std::uint64_t hi = lo + count * esz;
  char* dst = static_cast<char*>(out);
  while (lo < hi) {
    const std::uint64_t block = lo / block_bytes_, block_lo = block * block_bytes_;
    const std::size_t len = read_block(chunk, tensor, esz, block, staging);
    const std::uint64_t take = std::min<std::uint64_t>(hi, block_lo + len) - lo;
    std::memcpy(dst, static_cast<const char*>(staging) + (lo - block_lo), take);
    dst += take;
    lo += take;
  }
}

void ChunkReader::verify(const ChunkRecord& chunk, const std::string& tensor, std::size_t esz, void* staging) const {
  for (std::uint64_t block = 0; block * block_bytes_ < chunk.count * esz; ++block)
    read_block(chunk, tensor, esz, block, staging);
}

// ---- small files and directories ----------------------------------------------------------------------------------

namespace {
void fsync_path(const std::string& path, int flags, const char* kind) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | flags);
  STRATA_CHECK_CODE(ErrorCode::kIo, fd >= 0, "cannot open {}{}: {}", kind, path, system_error(errno));
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  STRATA_CHECK_CODE(ErrorCode::kIo, ok, "cannot flush {}{} to disk: {}", kind, path, system_error(err));
}
}  // namespace

void fsync_directory(const std::string& dir) { fsync_path(dir, O_DIRECTORY, "directory "); }

void fsync_file(const std::string& path) { fsync_path(path, 0, ""); }

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = unique_tmp_path(path);  // never shared with another writer of `path`
  try {
    ChunkWriter w(tmp, std::size_t{1} << 20);
    std::vector<std::uint32_t> unused;
    if (!text.empty()) w.append(text.data(), text.size(), unused);
    w.finish();
    STRATA_CHECK_CODE(ErrorCode::kIo, ::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename {} to {}: {}", tmp,
                      path, system_error(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  const std::size_t slash = path.find_last_of('/');
  fsync_directory(slash == std::string::npos ? "." : path.substr(0, slash));
}

std::string read_text_file(const std::string& path) { return read_input_file(path, ""); }

}  // namespace strata
