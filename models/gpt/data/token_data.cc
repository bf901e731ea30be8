// TokenFile loading and checks, the batch window rule, and the splitmix64 synthetic token generator.
#include "models/gpt/data/token_data.h"

#include <initializer_list>
#include <algorithm>
#include <bit>
#include <cstring>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/file_checks.h"

namespace strata::gpt {

static_assert(std::endian::native == std::endian::little, "token files are read as host-order uint16");

namespace {

// splitmix64 and the spec's token rule, resumable so a file can be generated in chunks.
class SyntheticTokens {
 public:
  SyntheticTokens(int vocab, std::uint64_t seed) : vocab_(static_cast<std::uint64_t>(vocab)), state_(seed) {}
  std::uint16_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    const std::uint64_t r = z ^ (z >> 31);
    if (first_ || r % 4 == 0)
      prev_ = (r >> 32) % vocab_;
    else
      prev_ = (31 * prev_ + 7 + (r >> 32) % 3) % vocab_;
    first_ = false;
    return static_cast<std::uint16_t>(prev_);
  }

 private:
  std::uint64_t vocab_;
  std::uint64_t state_;
  std::uint64_t prev_ = 0;
  bool first_ = true;
};

void check_vocab(int vocab) {
  STRATA_CHECK(vocab >= 1 && vocab <= 65536,
               "synthetic tokens are uint16: vocab {} is outside [1, 65536] (give --data, uint32 token shards for a "
               "larger vocabulary)", vocab);
}

}  // namespace

TokenFile::TokenFile(std::string path, int seq_len, int vocab) : path_(std::move(path)) {
  STRATA_CHECK(seq_len >= 1, "sequence length {} must be >= 1", seq_len);
  STRATA_CHECK(vocab >= 0, "vocab {} must be >= 0 (0: unchecked)", vocab);
}

template <typename Fn>
void TokenFile::for_each_part(std::uint64_t begin, std::uint64_t n, Fn&& fn) const {
  STRATA_CHECK(begin + n <= size_, "tokens [{}, {}) of '{}', which has {}", begin, begin + n, path_, size_);
  std::size_t s = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
  for (std::uint64_t done = 0; done < n; ++s) {
    const std::uint64_t at = begin + done - starts_[s];
    const std::uint64_t k = std::min(n - done, shards_[s].size() - at);
    fn(shards_[s], at, k, done);
    done += k;
  }
}

void TokenFile::copy(std::uint64_t begin, std::uint64_t n, std::uint32_t* out) const {
  if (shards_.empty()) {
    STRATA_CHECK(begin + n <= size_, "tokens [{}, {}) of '{}', which has {}", begin, begin + n, path_, size_);
    for (std::uint64_t i = 0; i < n; ++i) out[i] = memory_[begin + i];
    return;
  }
  for_each_part(begin, n, [&](const MappedShard& sh, std::uint64_t at, std::uint64_t k, std::uint64_t o) {
    sh.copy(at, k, out + o);
  });
}

void TokenFile::read(std::uint64_t begin, std::uint64_t n, std::uint32_t* out) const {
  if (shards_.empty()) return copy(begin, n, out);
  for_each_part(begin, n, [&](const MappedShard& sh, std::uint64_t at, std::uint64_t k, std::uint64_t o) {
    sh.read(at, k, out + o);
  });
}

void TokenFile::check(int seq_len, int vocab) {
  STRATA_CHECK_CODE(ErrorCode::kIo, size_ >= static_cast<std::uint64_t>(seq_len) + 1,
                    "token file '{}' has {} tokens; sequence length {} needs at least {}", path_, size_, seq_len,
                    static_cast<std::uint64_t>(seq_len) + 1);
  // Every token, in blocks: the largest, and the first at or above the vocabulary (named by its file and index).
  constexpr std::uint64_t kBlock = std::uint64_t{1} << 18;
  std::vector<std::uint32_t> buf(static_cast<std::size_t>(std::min(kBlock, size_)));
  for (std::uint64_t at = 0; at < size_;) {
    const std::uint64_t n = std::min(kBlock, size_ - at);
    read(at, n, buf.data());
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint32_t t = buf[i];
      max_token_ = std::max(max_token_, t);
      if (vocab > 0 && t >= static_cast<std::uint32_t>(vocab)) {
        const std::uint64_t g = at + i;
        if (shards_.empty())
          STRATA_THROW(ErrorCode::kIo, "token file '{}': token {} at index {} is >= vocab {}", path_, t, g, vocab);
        const std::size_t s =
            static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), g) - starts_.begin()) - 1;
        STRATA_THROW(ErrorCode::kIo, "token file '{}': token {} at index {} is >= vocab {}", shards_[s].path(), t,
                     g - starts_[s], vocab);
      }
    }
    at += n;
  }
}

TokenFile TokenFile::open(const std::string& spec, int seq_len, int vocab) {
  TokenFile f(spec, seq_len, vocab);
  f.files_ = expand_shard_paths(spec);
  for (const std::string& file : f.files_) {
    f.shards_.emplace_back(file);
    f.starts_.push_back(f.size_);
    f.size_ += f.shards_.back().size();
    f.token_bytes_ = std::max(f.token_bytes_, f.shards_.back().info().token_bytes);
  }
  f.check(seq_len, vocab);
  return f;
}

TokenFile TokenFile::from_text(const std::string& path, int seq_len) {
  const std::string bytes = read_input_file(path, "text file");
  std::vector<std::uint16_t> tokens(bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) tokens[i] = static_cast<unsigned char>(bytes[i]);
  return from_tokens(std::move(tokens), seq_len, 256, path);
}

TokenFile TokenFile::from_tokens(std::vector<std::uint16_t> tokens, int seq_len, int vocab, std::string name) {
  TokenFile f(std::move(name), seq_len, vocab);
  f.memory_ = std::move(tokens);
  f.size_ = f.memory_.size();
  f.check(seq_len, vocab);
  return f;
}

namespace {

// A bijection of [0, k) from `key`: a 4-round Feistel network on the smallest even number of bits that holds k,
// walking the cycle until the value falls below k (at most a few steps: the domain is under 4k).
std::uint64_t permute(std::uint64_t x, std::uint64_t k, std::uint64_t key) {
  int bits = 2;
  while (bits < 64 && (std::uint64_t{1} << bits) < k) bits += 2;
  const int half = bits / 2;
  const std::uint64_t mask = (std::uint64_t{1} << half) - 1;
  do {
    std::uint64_t l = x >> half, r = x & mask;
    for (std::uint64_t round = 0; round < 4; ++round) {
      const std::uint64_t f = splitmix64(key ^ splitmix64(round * 0x9E3779B97F4A7C15ull ^ r)) & mask;
      const std::uint64_t next = l ^ f;
      l = r;
      r = next;
    }
    x = (l << half) | r;
  } while (x >= k);
  return x;
}

}  // namespace

std::uint64_t window_offset(const TokenFile& data, unsigned __int128 g, int T) {
  using u128 = unsigned __int128;
  const std::uint64_t m = data.size() - static_cast<std::uint64_t>(T);
  if (!data.shuffle_seed()) return static_cast<std::uint64_t>(((g % m) * static_cast<u128>(T)) % m);
  const std::uint64_t k = std::max<std::uint64_t>(1, m / static_cast<std::uint64_t>(T));  // windows an epoch
  const std::uint64_t epoch = static_cast<std::uint64_t>(g / k), w = static_cast<std::uint64_t>(g % k);
  return permute(w, k, splitmix64(*data.shuffle_seed() ^ splitmix64(epoch))) * static_cast<std::uint64_t>(T);
}

namespace {

// The window rule for rows first_row .. first_row + B - 1: row b's inputs are positions [begin, end) of each of its
// `spans` (global positions of the row), written one span after another into inputs (and targets, one further).
// g can pass 2^64 only for absurd arguments, but 128 bits keep the rule exact for any int inputs.
struct Span {
  int begin, end;
};
void fill_from(const TokenFile& data, unsigned __int128 first_row, int B, int T, std::initializer_list<Span> spans,
               std::int32_t* inputs, std::int32_t* targets) {
  STRATA_CHECK(B >= 1 && T >= 1, "batch shape B={} T={}", B, T);
  STRATA_CHECK(inputs != nullptr && targets != nullptr, "null batch buffers");
  const std::uint64_t n = data.size();
  STRATA_CHECK(n >= static_cast<std::uint64_t>(T) + 1, "'{}' has {} tokens, fewer than T + 1 = {}", data.path(), n,
               static_cast<std::uint64_t>(T) + 1);
  using u128 = unsigned __int128;
  std::size_t row = 0;  // tokens per row written
  for (const Span& sp : spans) row += static_cast<std::size_t>(sp.end - sp.begin);
  std::vector<std::uint32_t> window(static_cast<std::size_t>(T) + 1);
  for (int b = 0; b < B; ++b) {
    const std::uint64_t offset = window_offset(data, first_row + static_cast<u128>(b), T);
    data.copy(offset, static_cast<std::uint64_t>(T) + 1, window.data());  // offset + T <= n - 1
    std::int32_t* in = inputs + static_cast<std::size_t>(b) * row;
    std::int32_t* tg = targets + static_cast<std::size_t>(b) * row;
    for (const Span& sp : spans)
      for (int t = sp.begin; t < sp.end; ++t) {
        *in++ = static_cast<std::int32_t>(window[static_cast<std::size_t>(t)]);
        *tg++ = static_cast<std::int32_t>(window[static_cast<std::size_t>(t) + 1]);
      }
  }
}

}  // namespace

void fill_batch(const TokenFile& data, int step, int micro, int micro_batches, int world, int rank, int B, int T,
                std::int32_t* inputs, std::int32_t* targets) {
  STRATA_CHECK(step >= 0, "step {} is negative", step);
  STRATA_CHECK(micro_batches >= 1 && micro >= 0 && micro < micro_batches, "micro-batch {} of {}", micro, micro_batches);
  STRATA_CHECK(world >= 1 && rank >= 0 && rank < world, "rank {} of world {}", rank, world);
  using u128 = unsigned __int128;
  fill_from(data, ((static_cast<u128>(step) * micro_batches + micro) * world + rank) * static_cast<u128>(B), B, T,
            {{0, T}}, inputs, targets);
}

void fill_rows(const TokenFile& data, std::uint64_t first_row, int B, int T, std::int32_t* inputs,
               std::int32_t* targets) {
  fill_from(data, first_row, B, T, {{0, T}}, inputs, targets);
}

void fill_chunk_rows(const TokenFile& data, std::uint64_t first_row, int B, const ContextChunks& chunks,
                     std::int32_t* inputs, std::int32_t* targets) {
  const int n = chunks.chunk_rows(), a = chunks.position(0), b = chunks.position(n);
  fill_from(data, first_row, B, chunks.seq, {{a, a + n}, {b, b + n}}, inputs, targets);
}

std::vector<std::uint16_t> synthetic_tokens(std::uint64_t n, int vocab, std::uint64_t seed) {
  check_vocab(vocab);
  SyntheticTokens gen(vocab, seed);
  std::vector<std::uint16_t> out(n);
  for (auto& t : out) t = gen.next();
  return out;
}

void make_synthetic_tokens(const std::string& path, std::uint64_t n, int vocab, std::uint64_t seed) {
  check_vocab(vocab);
  SyntheticTokens gen(vocab, seed);
  AtomicFile file(path);
  std::vector<std::uint16_t> chunk;
  for (std::uint64_t done = 0; done < n;) {
    chunk.resize(std::min<std::uint64_t>(n - done, 1 << 20));
    for (auto& t : chunk) t = gen.next();
    file.write(chunk.data(), chunk.size() * 2);
    done += chunk.size();
  }
  file.commit();
}

void write_tokens(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  AtomicFile file(path);
  file.write(tokens.data(), tokens.size() * 2);
  file.commit();
}

}  // namespace strata::gpt
