// Token shards: format detection, the mapped reader and Strata's writer.
#include "runtime/data/token_shard.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/file_checks.h"

namespace strata {

static_assert(std::endian::native == std::endian::little, "token shards are read as host-order integers");

namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'T', 'K'};
constexpr std::uint64_t kStrataHeader = 64;
constexpr std::uint64_t kLlmcHeader = 256 * 4;
constexpr std::int32_t kLlmcGpt2 = 20240520, kLlmcLlama3 = 20240801;

// Reads exactly n bytes at `offset` (fewer only at the end of the file); returns what was read.
std::size_t pread_some(int fd, void* out, std::size_t n, std::uint64_t offset, const std::string& path) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, static_cast<char*>(out) + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    STRATA_CHECK_CODE(ErrorCode::kIo, r >= 0, "token shard '{}': cannot read: {}", path, std::strerror(errno));
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

const char* shard_format_name(ShardFormat format) {
  switch (format) {
    case ShardFormat::kStrata: return "strata";
    case ShardFormat::kLlmc: return "llm.c";
    case ShardFormat::kPlain: return "plain uint16";
  }
  return "?";
}

ShardInfo inspect_token_shard(const std::string& path) {
  Fd f{open_input_file(path, "token shard")};
  struct stat st {};
  STRATA_CHECK_CODE(ErrorCode::kIo, ::fstat(f.fd, &st) == 0, "token shard '{}': {}", path, std::strerror(errno));
  const std::uint64_t bytes = static_cast<std::uint64_t>(st.st_size);
  std::array<unsigned char, kLlmcHeader> head{};
  const std::size_t got = pread_some(f.fd, head.data(), head.size(), 0, path);
  ShardInfo info;
  std::int32_t words[3] = {0, 0, 0};
  if (got >= 12) std::memcpy(words, head.data(), 12);
  if (got >= 8 && std::memcmp(head.data(), kMagic, 8) == 0) {
    STRATA_CHECK_CODE(ErrorCode::kIo, bytes >= kStrataHeader,
                      "token shard '{}': {} bytes, shorter than its {}-byte "
                      "header",
                      path, bytes, kStrataHeader);
    std::uint32_t version = 0, width = 0;
    std::memcpy(&version, head.data() + 8, 4);
    std::memcpy(&width, head.data() + 12, 4);
    std::memcpy(&info.tokens, head.data() + 16, 8);
    STRATA_CHECK_CODE(ErrorCode::kIo, version == 1, "token shard '{}': header version {}; this build reads version 1",
                      path, version);
    STRATA_CHECK_CODE(ErrorCode::kIo, width == 2 || width == 4,
                      "token shard '{}': token width {} bytes in its "
                      "header; expected 2 (uint16) or 4 (uint32)",
                      path, width);
    info.format = ShardFormat::kStrata;
    info.header_bytes = kStrataHeader;
    info.token_bytes = static_cast<int>(width);
  } else if (got >= 12 && (words[0] == kLlmcGpt2 || words[0] == kLlmcLlama3)) {
    const bool gpt2 = words[0] == kLlmcGpt2;
    STRATA_CHECK_CODE(ErrorCode::kIo, bytes >= kLlmcHeader,
                      "token shard '{}': {} bytes, shorter than llm.c's "
                      "1024-byte header",
                      path, bytes);
    STRATA_CHECK_CODE(ErrorCode::kIo, words[1] == (gpt2 ? 1 : 7),
                      "token shard '{}': llm.c magic {} with version {}; "
                      "expected version {}",
                      path, words[0], words[1], gpt2 ? 1 : 7);
    STRATA_CHECK_CODE(ErrorCode::kIo, words[2] >= 0, "token shard '{}': llm.c header counts {} tokens", path, words[2]);
    info.format = ShardFormat::kLlmc;
    info.header_bytes = kLlmcHeader;
    info.token_bytes = gpt2 ? 2 : 4;
    info.tokens = static_cast<std::uint64_t>(words[2]);
  } else {
    STRATA_CHECK_CODE(ErrorCode::kIo, bytes % 2 == 0,
                      "token file '{}' is {} bytes, an odd size: expected "
                      "little-endian uint16 tokens (or a Strata or llm.c shard header)",
                      path, bytes);
    info.tokens = bytes / 2;
    return info;
  }
  const std::uint64_t want = info.header_bytes + info.tokens * static_cast<std::uint64_t>(info.token_bytes);
  STRATA_CHECK_CODE(ErrorCode::kIo, bytes == want,
                    "token shard '{}' ({} format): its header counts {} tokens of {} "
                    "bytes, {} bytes in all, but the file is {} bytes{}",
                    path, shard_format_name(info.format), info.tokens, info.token_bytes, want, bytes,
                    bytes < want ? " (truncated)" : "");
  return info;
}

MappedShard::MappedShard(const std::string& path) : path_(path), info_(inspect_token_shard(path)) {
  if (info_.tokens == 0) return;
  fd_ = open_input_file(path, "token shard");
  map_bytes_ =
      static_cast<std::size_t>(info_.header_bytes + info_.tokens * static_cast<std::uint64_t>(info_.token_bytes));
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, fd_, 0);
  if (map_ == MAP_FAILED) {
    ::close(fd_);
    fd_ = -1;
  }
  STRATA_CHECK_CODE(ErrorCode::kIo, map_ != MAP_FAILED, "token shard '{}': cannot map its {} bytes: {}", path,
                    map_bytes_, std::strerror(errno));
  tokens_ = static_cast<const char*>(map_) + info_.header_bytes;
}

MappedShard::~MappedShard() {
  if (map_ && map_ != MAP_FAILED) ::munmap(map_, map_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

MappedShard::MappedShard(MappedShard&& o) noexcept
    : path_(std::move(o.path_)),
      info_(o.info_),
      fd_(o.fd_),
      map_(o.map_),
      map_bytes_(o.map_bytes_),
      tokens_(o.tokens_) {
  o.fd_ = -1;
  o.map_ = nullptr;
  o.tokens_ = nullptr;
}

void MappedShard::copy(std::uint64_t begin, std::uint64_t n, std::uint32_t* out) const {
  if (info_.token_bytes == 4) {
    std::memcpy(out, static_cast<const std::uint32_t*>(tokens_) + begin, n * 4);
    return;
  }
  const std::uint16_t* t = static_cast<const std::uint16_t*>(tokens_) + begin;
  for (std::uint64_t i = 0; i < n; ++i) out[i] = t[i];
}

void MappedShard::read(std::uint64_t begin, std::uint64_t n, std::uint32_t* out) const {
  STRATA_CHECK(begin + n <= info_.tokens, "token shard '{}': tokens [{}, {}) of {}", path_, begin, begin + n,
               info_.tokens);
  if (n == 0) return;
  const std::uint64_t width = static_cast<std::uint64_t>(info_.token_bytes);
  constexpr std::uint64_t kBlock = 1 << 20;  // bytes per read
  std::vector<unsigned char> buf(static_cast<std::size_t>(std::min(kBlock, n * width)));
  for (std::uint64_t at = 0; at < n;) {
    const std::uint64_t k = std::min<std::uint64_t>(kBlock / width, n - at);
    const std::size_t got = pread_some(fd_, buf.data(), static_cast<std::size_t>(k * width),
                                       info_.header_bytes + (begin + at) * width, path_);
    STRATA_CHECK_CODE(ErrorCode::kIo, got == k * width, "token shard '{}': it shrank while being read", path_);
    for (std::uint64_t i = 0; i < k; ++i) {
      if (width == 2) {
        std::uint16_t t;
        std::memcpy(&t, buf.data() + i * 2, 2);
        out[at + i] = t;
      } else {
        std::memcpy(&out[at + i], buf.data() + i * 4, 4);
      }
    }
    at += k;
  }
}

struct TokenShardWriter::Impl {
  AtomicFile file;
  int width;
  std::vector<unsigned char> buf;
};

TokenShardWriter::TokenShardWriter(std::string path, int token_bytes) : impl_(nullptr) {
  STRATA_CHECK(token_bytes == 2 || token_bytes == 4, "token shard '{}': token width {} bytes; 2 or 4", path,
               token_bytes);
  std::unique_ptr<Impl> impl(new Impl{AtomicFile(std::move(path)), token_bytes, {}});
  std::array<unsigned char, kStrataHeader> header{};  // the count is written by finish()
  impl->file.write(header.data(), header.size());
  impl_ = impl.release();
}

TokenShardWriter::~TokenShardWriter() { delete impl_; }

void TokenShardWriter::append(const std::uint32_t* tokens, std::size_t n) {
  STRATA_CHECK(impl_ != nullptr, "token shard writer used after finish()");
  const std::size_t width = static_cast<std::size_t>(impl_->width);
  impl_->buf.resize(n * width);
  for (std::size_t i = 0; i < n; ++i) {
    if (width == 2) {
      STRATA_CHECK(tokens[i] <= 0xffff,
                   "token shard '{}': token {} at index {} does not fit uint16 (write uint32 "
                   "tokens for a vocabulary above 65536)",
                   impl_->file.path(), tokens[i], count_ + i);
      const std::uint16_t s = static_cast<std::uint16_t>(tokens[i]);
      std::memcpy(impl_->buf.data() + i * 2, &s, 2);
    } else {
      std::memcpy(impl_->buf.data() + i * 4, &tokens[i], 4);
    }
  }
  impl_->file.write(impl_->buf.data(), impl_->buf.size());
  count_ += n;
}

void TokenShardWriter::finish() {
  STRATA_CHECK(impl_ != nullptr, "token shard writer finished twice");
  // The header at the front of the temporary, then the rename.
  std::array<unsigned char, kStrataHeader> header{};
  std::memcpy(header.data(), kMagic, 8);
  const std::uint32_t version = 1, width = static_cast<std::uint32_t>(impl_->width);
  std::memcpy(header.data() + 8, &version, 4);
  std::memcpy(header.data() + 12, &width, 4);
  std::memcpy(header.data() + 16, &count_, 8);
  const int fd = ::open(impl_->file.tmp_path().c_str(), O_WRONLY | O_CLOEXEC);
  STRATA_CHECK_CODE(ErrorCode::kIo, fd >= 0, "token shard '{}': cannot reopen {}: {}", impl_->file.path(),
                    impl_->file.tmp_path(), std::strerror(errno));
  const ssize_t w = ::pwrite(fd, header.data(), header.size(), 0);
  const int saved = errno;
  ::close(fd);
  STRATA_CHECK_CODE(ErrorCode::kIo, w == static_cast<ssize_t>(header.size()),
                    "token shard '{}': cannot write its "
                    "header: {}",
                    impl_->file.path(), std::strerror(saved));
  impl_->file.commit();
  delete impl_;
  impl_ = nullptr;
}

std::vector<std::string> expand_shard_paths(const std::string& spec) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= spec.size()) {
    const std::size_t comma = spec.find(',', at);
    const std::string part = spec.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (part.empty()) continue;
    if (part.find_first_of("*?[") == std::string::npos) {
      out.push_back(part);
      continue;
    }
    glob_t g{};
    const int rc = ::glob(part.c_str(), 0, nullptr, &g);
    std::vector<std::string> matched;
    if (rc == 0)
      for (std::size_t i = 0; i < g.gl_pathc; ++i) matched.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    STRATA_CHECK_CODE(ErrorCode::kIo, !matched.empty(), "token data '{}': the pattern matches no file", part);
    std::sort(matched.begin(), matched.end());
    out.insert(out.end(), matched.begin(), matched.end());
  }
  STRATA_CHECK_CODE(ErrorCode::kIo, !out.empty(), "token data '{}': no file named", spec);
  return out;
}

}  // namespace strata
