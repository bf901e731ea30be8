// The MLP's one sequence-mixing layer: with --seq T its rows are sequences of T positions, and after layer 1 (a
// row-parallel layer's whole output under tp) a parameter-free causal self-attention mixes them: y = h + attention(q =
// k = v = h), one head of the hidden width. Split over a cp group by the library's mirrored chunks and RingAttention,
// on the installed CPU attention kernels (strata::make_kernels), so custom_trainer --cp runs context parallelism on
// the installed API. Its activations are f32 or bf16 (the ring's bf16 overloads: its blocks travel in bf16).
#pragma once

#include <strata/strata.h>

#include <memory>
#include <vector>

#include "models/mlp/mlp.h"

namespace strata::mlp {

class MlpAttention {
 public:
  // `sequences` of this rank's chunks.local_rows() rows each, `width` wide, activations of `activations` (f32 or
  // bf16).
  MlpAttention(Communicator& cp, const ContextChunks& chunks, int sequences, int width,
               DType activations = DType::kF32);

  // y = h + attention(h) for this rank's rows [B L, C], T the activations' type (float or Bf16; bf16: the residual
  // sum in f32, rounded once); keeps what its backward needs in `kept`, in the ledger (kActivations): the input h
  // [rows, C] and the attention's output [rows, C] (of T), its log-sum-exp [B, 1, L] (f32).
  template <typename T>
  std::vector<T> forward(const std::vector<T>& h, std::vector<KeptValues>& kept);
  // The gradient of h from that of y: dy + the attention's (through q, k and v alike; bf16: summed in f32, rounded
  // once).
  template <typename T>
  std::vector<T> backward(const std::vector<T>& dy, const std::vector<KeptValues>& kept);

  // Bytes a forward keeps (per micro-batch), and the ring's own buffers (RingAttention's).
  std::uint64_t kept_bytes() const;
  std::size_t comm_buffer_bytes() const { return ring_.comm_buffer_bytes(); }
  std::size_t workspace_bytes() const { return ring_.workspace_bytes(); }
  std::uint64_t bytes_sent() const { return ring_.bytes_sent(); }
  int local_rows() const { return L_; }

 private:
  template <typename T>
  std::vector<T> qkv_of(const T* h) const;

  Device& device_;
  std::unique_ptr<Kernels> kernels_;
  RingAttention ring_;
  int B_, L_, C_;
};

}  // namespace strata::mlp
