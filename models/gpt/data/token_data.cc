// TokenFile loading and checks, the batch window rule, and the splitmix64 synthetic token generator.
#include "models/gpt/data/token_data.h"

#include <initializer_list>
#include <algorithm>
#include <bit>
#include <cstring>

#include "core/atomic_file.h"
#include "core/error.h"
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
  STRATA_CHECK(vocab >= 1 && vocab <= 65536, "vocab {} is outside [1, 65536] (tokens are uint16)", vocab);
}

}  // namespace

TokenFile::TokenFile(std::string path, std::vector<std::uint16_t> tokens, int seq_len, int vocab)
    : path_(std::move(path)), tokens_(std::move(tokens)) {
  STRATA_CHECK(seq_len >= 1, "sequence length {} must be >= 1", seq_len);
  STRATA_CHECK(vocab >= 0 && vocab <= 65536, "vocab {} is outside [0, 65536] (0: unchecked)", vocab);
  STRATA_CHECK_CODE(ErrorCode::kIo, tokens_.size() >= static_cast<std::uint64_t>(seq_len) + 1,
                    "token file '{}' has {} tokens; sequence length {} needs at least {}", path_, tokens_.size(),
                    seq_len, static_cast<std::uint64_t>(seq_len) + 1);
  if (!tokens_.empty()) max_token_ = *std::max_element(tokens_.begin(), tokens_.end());
  if (vocab > 0 && max_token_ >= vocab) {
    auto bad = std::find_if(tokens_.begin(), tokens_.end(), [&](std::uint16_t t) { return t >= vocab; });
    STRATA_THROW(ErrorCode::kIo, "token file '{}': token {} at index {} is >= vocab {}", path_, *bad,
                 bad - tokens_.begin(), vocab);
  }
}

TokenFile TokenFile::open(const std::string& path, int seq_len, int vocab) {
  const std::string bytes = read_input_file(path, "token file");
  STRATA_CHECK_CODE(ErrorCode::kIo, bytes.size() % 2 == 0,
                    "token file '{}' is {} bytes, an odd size: expected little-endian uint16 tokens", path,
                    bytes.size());
  std::vector<std::uint16_t> tokens(bytes.size() / 2);
  if (!bytes.empty()) std::memcpy(tokens.data(), bytes.data(), bytes.size());
  return TokenFile(path, std::move(tokens), seq_len, vocab);
}

TokenFile TokenFile::from_text(const std::string& path, int seq_len) {
  const std::string bytes = read_input_file(path, "text file");
  std::vector<std::uint16_t> tokens(bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) tokens[i] = static_cast<unsigned char>(bytes[i]);
  return TokenFile(path, std::move(tokens), seq_len, 256);
}

TokenFile TokenFile::from_tokens(std::vector<std::uint16_t> tokens, int seq_len, int vocab, std::string name) {
  return TokenFile(std::move(name), std::move(tokens), seq_len, vocab);
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
  const u128 m = n - static_cast<std::uint64_t>(T);
  const std::uint16_t* tokens = data.tokens().data();
  std::size_t row = 0;  // tokens per row written
  for (const Span& sp : spans) row += static_cast<std::size_t>(sp.end - sp.begin);
  for (int b = 0; b < B; ++b) {
    const u128 g = first_row + static_cast<u128>(b);
    const auto offset = static_cast<std::uint64_t>(((g % m) * static_cast<u128>(T)) % m);
    const std::uint16_t* window = tokens + offset;  // offset + T <= n - 1, so window[T] is in range
    std::int32_t* in = inputs + static_cast<std::size_t>(b) * row;
    std::int32_t* tg = targets + static_cast<std::size_t>(b) * row;
    for (const Span& sp : spans)
      for (int t = sp.begin; t < sp.end; ++t) {
        *in++ = window[t];
        *tg++ = window[t + 1];
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
