// Decoder: what generate() (generator.h) drives, the seam between a model's forward-only pass with a KV cache and the
// generation loop. Up to sequences() sequences share one pass; each holds up to context() positions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace strata {

class Communicator;

class Decoder {
 public:
  virtual ~Decoder() = default;

  virtual int vocab() const = 0;      // logits per row
  virtual int context() const = 0;    // positions a sequence can hold
  virtual int sequences() const = 0;  // sequence slots
  virtual int length(int seq) const = 0;  // positions cached for sequence `seq`
  virtual void reset(int seq) = 0;        // forgets them: a new sequence may take the slot

  // The next `n` tokens of sequence `seq` (host memory) into its cache. Returns the logits of the last one (vocab()
  // floats, host memory, valid until the next call); with `all_logits`, the n rows of logits go there too.
  virtual const float* prefill(int seq, const std::int32_t* tokens, int n, float* all_logits = nullptr) = 0;
  // One token for each sequence in `seqs` (distinct), at each one's next position, in one pass. Returns one row of
  // logits per sequence in the order given (host memory, valid until the next call).
  virtual const float* decode(const std::vector<int>& seqs, const std::vector<std::int32_t>& tokens) = 0;

  // What the passes so far read from device memory (weights and cache), and copied into it from host memory or disk
  // (streamed weights): generate() reports the decode passes' share.
  virtual std::uint64_t weight_bytes_read() const = 0;
  virtual std::uint64_t cache_bytes_read() const = 0;
  virtual std::uint64_t streamed_bytes_read() const { return 0; }
  // Keys and values the passes so far copied between a KV cache in host memory and the device, both ways.
  virtual std::uint64_t cache_link_bytes() const { return 0; }
  // What the passes so far received from other ranks into device memory (their parts of sharded weights).
  virtual std::uint64_t gathered_bytes_read() const { return 0; }

  // Ranks that take every pass together although each decodes its own sequences (weights sharded over them and
  // gathered block by block in every pass). generate() keeps them in step: the group agrees on the number of prefill
  // passes and, before each decode pass, on whether any rank still decodes; a rank with nothing to do takes
  // idle_pass(). Null (the default): this rank's passes are its own.
  virtual Communicator* lockstep_group() { return nullptr; }
  // A pass over no rows: only the collectives every pass takes part in.
  virtual void idle_pass() {}
  // The passes prefill() of `n` tokens takes (a long prompt goes through in chunks).
  virtual int prefill_passes(int n) const { return n > 0 ? 1 : 0; }
  // Host threads that keep copying weights into device memory while the passes compute (streamed blocks on the CPU
  // backend: one per upload stream). A copy thread sharing a core with the compute threads slows both, so a caller
  // choosing its compute threads leaves these their cores: compute_threads() below.
  virtual int copy_threads() const { return 0; }

 protected:
  Decoder() = default;
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;
};

// The compute threads for `decoder` on `cores` cores: the cores its copy threads leave, at least one.
inline int compute_threads(int cores, const Decoder& decoder) { return std::max(1, cores - decoder.copy_threads()); }

}  // namespace strata
