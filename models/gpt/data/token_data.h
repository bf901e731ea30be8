// TokenFile (token shards, byte-level text) and the spec's batch window rule and synthetic data generator.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/context/context_chunks.h"
#include "runtime/data/token_shard.h"

namespace strata::gpt {

// The tokens training reads: shards of any format (runtime/data/token_shard.h: Strata's, llm.c's .bin, nanoGPT's plain
// uint16), memory-mapped and never read whole into memory, their concatenation one sequence of N tokens; or tokens
// held in memory (byte-level text, tests, generated data). Tokens are uint16 or uint32 in the files, uint32 here.
class TokenFile {
 public:
  // `spec`: a file, a glob (sorted) or a comma-separated list of either (expand_shard_paths). Checks every header
  // against its file's size, that there are at least seq_len + 1 tokens, and when vocab > 0 that every token is
  // < vocab (naming the file, the token's index and value; a scan in bounded reads that leaves nothing resident).
  // Errors are kIo (kInvalidArgument for a bad seq_len / vocab argument).
  static TokenFile open(const std::string& spec, int seq_len, int vocab = 0);
  // Byte-level text: every byte of the file is one token (vocab 256). Needs at least seq_len + 1 bytes.
  static TokenFile from_text(const std::string& path, int seq_len);
  // Tokens already in memory (tests, generated data); the same checks as open(). `name` appears in errors.
  static TokenFile from_tokens(std::vector<std::uint16_t> tokens, int seq_len, int vocab = 0,
                               std::string name = "<memory>");
  TokenFile(TokenFile&&) = default;

  const std::string& path() const { return path_; }  // the spec, or the text file, or the name
  const std::vector<std::string>& files() const { return files_; }  // the shards in order (none in memory)
  std::uint64_t size() const { return size_; }  // N
  std::uint32_t max_token() const { return max_token_; }  // 0 when empty
  int token_bytes() const { return token_bytes_; }  // the widest shard's (2 in memory)
  // Tokens [begin, begin + n) of the concatenation, through the mappings (a training window).
  void copy(std::uint64_t begin, std::uint64_t n, std::uint32_t* out) const;
  // The same through read calls (leaves no page of a shard resident: checks and fingerprints of large files).
  void read(std::uint64_t begin, std::uint64_t n, std::uint32_t* out) const;
  // Windows in a seeded order per epoch (train_gpt --shuffle) instead of the window rule's walk through the data: the
  // K = floor((N - T) / T) windows starting at multiples of T, epoch e = g / K visiting them in the order of a
  // bijection of [0, K) drawn from (seed, e). Row g still decides its window alone, so every layout reads the same.
  void shuffle_windows(std::uint64_t seed) { shuffle_seed_ = seed; }
  const std::optional<std::uint64_t>& shuffle_seed() const { return shuffle_seed_; }

 private:
  TokenFile(std::string path, int seq_len, int vocab);
  void check(int seq_len, int vocab);
  // Calls fn(shard, begin within it, count, offset in the output) for each shard's part of [begin, begin + n).
  template <typename Fn>
  void for_each_part(std::uint64_t begin, std::uint64_t n, Fn&& fn) const;
  std::string path_;
  std::vector<std::string> files_;
  std::vector<std::uint16_t> memory_;  // from_text, from_tokens
  std::vector<MappedShard> shards_;
  std::vector<std::uint64_t> starts_;  // each shard's first index in the concatenation
  std::uint64_t size_ = 0;
  std::uint32_t max_token_ = 0;
  int token_bytes_ = 2;
  std::optional<std::uint64_t> shuffle_seed_;
};

// Where row g's window starts in a file of n tokens, for rows of T tokens: the window rule, (g T) mod (n - T), or with
// shuffle_windows the seeded order of its epoch.
std::uint64_t window_offset(const TokenFile& data, unsigned __int128 g, int T);

// The rows one rank feeds in micro-batch `micro` of step `step` (the spec's window rule): for row b,
//   g = ((step * micro_batches + micro) * world + rank) * B + b,  offset = (g * T) mod (N - T),
//   inputs[b*T .. b*T+T-1] = tokens[offset .. offset+T-1],  targets[b*T ..] = tokens[offset+1 .. offset+T].
// Computed exactly (128-bit intermediates), so any step count is safe. inputs and targets hold B * T each.
void fill_batch(const TokenFile& data, int step, int micro, int micro_batches, int world, int rank, int B, int T,
                std::int32_t* inputs, std::int32_t* targets);
// The same rule from the global row index of the first row: rows first_row .. first_row + B - 1. A resumed run
// continues from the global rows already consumed, whatever its rank count.
void fill_rows(const TokenFile& data, std::uint64_t first_row, int B, int T, std::int32_t* inputs,
               std::int32_t* targets);

// Context parallelism: fill_rows for rows of chunks.seq tokens, writing only this cp rank's two mirrored chunks of
// each row, in local order (ContextChunks::position): inputs and targets hold B * chunks.local_rows() each.
void fill_chunk_rows(const TokenFile& data, std::uint64_t first_row, int B, const ContextChunks& chunks,
                     std::int32_t* inputs, std::int32_t* targets);

// The spec's synthetic data: splitmix64 from state `seed`; t_0 and every t_i whose draw r_i % 4 == 0 is
// (r_i >> 32) % vocab, the others (31 t_{i-1} + 7 + (r_i >> 32) % 3) % vocab. vocab in [1, 65536].
std::vector<std::uint16_t> synthetic_tokens(std::uint64_t n, int vocab, std::uint64_t seed);
// The same tokens written as a data file (generated in chunks; through path + ".tmp" and a rename).
void make_synthetic_tokens(const std::string& path, std::uint64_t n, int vocab, std::uint64_t seed);

// Writes tokens as a data file (little-endian uint16; through path + ".tmp" and a rename).
void write_tokens(const std::string& path, const std::vector<std::uint16_t>& tokens);

}  // namespace strata::gpt
