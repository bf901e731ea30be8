// TokenFile (uint16 token data, byte-level text) and the spec's batch window rule and synthetic data generator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/context/context_chunks.h"

namespace strata::gpt {

// The tokens of a data file, held in memory: a flat array of little-endian uint16 tokens, N = file size / 2
// (docs/gpt-model.md, "Data").
class TokenFile {
 public:
  // Checks that the file exists, has an even size and at least seq_len + 1 tokens, and when vocab > 0 that every
  // token is < vocab (naming the first bad token's index and value). Errors are kIo (kInvalidArgument for a bad
  // seq_len / vocab argument).
  static TokenFile open(const std::string& path, int seq_len, int vocab = 0);
  // Byte-level text: every byte of the file is one token (vocab 256). Needs at least seq_len + 1 bytes.
  static TokenFile from_text(const std::string& path, int seq_len);
  // Tokens already in memory (tests, generated data); the same checks as open(). `name` appears in errors.
  static TokenFile from_tokens(std::vector<std::uint16_t> tokens, int seq_len, int vocab = 0,
                               std::string name = "<memory>");

  const std::string& path() const { return path_; }
  std::uint64_t size() const { return tokens_.size(); }  // N
  const std::vector<std::uint16_t>& tokens() const { return tokens_; }
  std::uint16_t max_token() const { return max_token_; }  // 0 when empty

 private:
  TokenFile(std::string path, std::vector<std::uint16_t> tokens, int seq_len, int vocab);
  std::string path_;
  std::vector<std::uint16_t> tokens_;
  std::uint16_t max_token_ = 0;
};

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
