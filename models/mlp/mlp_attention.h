// The MLP's one sequence-mixing layer: with --seq T its rows are sequences of T positions, and after layer 1 (a
// row-parallel layer's whole output under tp) a parameter-free causal self-attention mixes them: y = h + attention(q =
// k = v = h), one head of the hidden width. Split over a cp group by the library's mirrored chunks and RingAttention,
// on the installed CPU attention kernels (strata::make_kernels), so custom_trainer --cp runs context parallelism on
// the installed API. f32 (bf16 activations are widened around it).
#pragma once

#include <strata/strata.h>

#include <memory>
#include <vector>

#include "models/mlp/mlp.h"

namespace strata::mlp {

class MlpAttention {
 public:
  // `sequences` of this rank's chunks.local_rows() rows each, `width` wide.
  MlpAttention(Communicator& cp, const ContextChunks& chunks, int sequences, int width);

  // y = h + attention(h) for this rank's rows [B L, C]; keeps what its backward needs in `kept`, in the ledger
  // (kActivations): the input h [rows, C], the attention's output [rows, C] and its log-sum-exp [B, 1, L].
  std::vector<float> forward(const std::vector<float>& h, std::vector<KeptValues>& kept);
  // The gradient of h from that of y: dy + the attention's (through q, k and v alike).
  std::vector<float> backward(const std::vector<float>& dy, const std::vector<KeptValues>& kept);

  // Bytes a forward keeps (per micro-batch), and the ring's own buffers (RingAttention's).
  static std::uint64_t kept_bytes(int sequences, int local_rows, int width);
  std::size_t comm_buffer_bytes() const { return ring_.comm_buffer_bytes(); }
  std::size_t workspace_bytes() const { return ring_.workspace_bytes(); }
  std::uint64_t bytes_sent() const { return ring_.bytes_sent(); }
  int local_rows() const { return L_; }

 private:
  std::vector<float> qkv_of(const float* h) const;

  Device& device_;
  std::unique_ptr<Kernels> kernels_;
  RingAttention ring_;
  int B_, L_, C_;
};

}  // namespace strata::mlp
