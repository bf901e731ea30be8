// ContextChunks: which tokens of a sequence a context-parallel rank holds. A sequence of T tokens is cut into 2 cp
// chunks of T / (2 cp); cp rank r holds chunk r and its mirror 2 cp - 1 - r, in that order, as its T / cp local rows
// (Megatron-Core's and torchtitan's load balance for the causal mask: an early chunk, which attends to few keys, goes
// with a late one, which attends to many, so every rank does the same work).
#pragma once

namespace strata {

struct ContextChunks {
  int seq = 1;   // T, the whole sequence
  int cp = 1;    // ranks in the cp group
  int rank = 0;  // this rank's index in it

  // Checks T and cp (T a positive multiple of 2 cp, 0 <= rank < cp): kInvalidArgument naming them.
  static ContextChunks of(int seq, int cp, int rank);

  int chunk_rows() const { return seq / (2 * cp); }  // tokens per chunk
  int local_rows() const { return seq / cp; }        // tokens this rank holds (two chunks)
  // The two chunks cp rank `r` holds, in local order: r, then 2 cp - 1 - r.
  int first_chunk(int r) const { return r; }
  int second_chunk(int r) const { return 2 * cp - 1 - r; }
  // The global position of this rank's local row `i` (0 <= i < local_rows()).
  int position(int i) const;
};

}  // namespace strata
