// RingAttention: causal self-attention over a sequence split across a cp group in mirrored chunks (context_chunks.h),
// as Megatron-Core's and torchtitan's context parallelism do it. Each rank holds its queries, keys and values; the key
// and value blocks travel round the ring (rank r sends to r + 1 and receives from r - 1) while each rank computes its
// queries against the block it holds and merges the results with the online softmax. cp steps, the exchange of the
// next block posted (batched send / recv on a stream of its own) before the current one is computed. Backward: the
// same ring, with the gradients of each key / value block travelling with it and arriving back at its owner after a
// full turn. Blocks whose keys are all after their queries are skipped, and the mirrored chunks make that the same
// share on every rank.
//
// Activations are f32, or bf16 (a constructor's choice): then the key / value blocks travel in bf16 (half the bytes)
// and the arithmetic runs on their widened values, the output and the query gradients summed in f32 scratch and rounded
// once, the key / value gradients travelling in f32 (as PyTorch's ring attention keeps them), added into the bf16
// gradient once at the end.
//
// Waits are the stream's and the communicator's bounded ones; a peer that never sends is named by the communicator
// (the hang report), with "ring attention" in what this rank waited in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "collectives/communicator.h"
#include "core/device.h"
#include "runtime/context/attention_kernels.h"
#include "runtime/context/context_chunks.h"

namespace strata {

class RingAttention {
 public:
  // cp: the group the sequence is split over (its rank is the chunks' rank, its size their cp). Batches of `batch`
  // sequences, each of chunks.local_rows() rows on this rank; queries `width` columns in `heads` heads of
  // D = width / heads, keys and values kv_heads heads of D (grouped-query attention: kv_heads divides heads; kv_heads
  // = heads is multi-head). Allocates the ring's buffers on cp's device: two key / value blocks and two of their
  // gradients (comm_buffer, kv_heads D wide each: GQA sends heads / kv_heads times less), and the backward's row
  // statistics and a block's output (workspace). `activations`: kF32, or kBF16 for the bf16 overloads (the blocks
  // then bf16, their gradients f32, and the workspace adds an f32 accumulator of this rank's output rows).
  RingAttention(Communicator& cp, AttentionKernels& kernels, const ContextChunks& chunks, int batch, int width,
                int heads, int kv_heads, DType activations = DType::kF32);
  ~RingAttention();
  RingAttention(const RingAttention&) = delete;
  RingAttention& operator=(const RingAttention&) = delete;

  // out [B, local, C] and lse [B, NH, local]: this rank's queries over every key of the sequence they see, from
  // qkv [B, local, C + 2 KVH D] (rows [q: C | k: KVH D | v: KVH D], the attention kernels' layout).
  void forward(float* out, float* lse, const float* qkv);
  // dqkv [B, local, C + 2 KVH D] += the gradient of the loss through out, given dout and forward's out and lse.
  void backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv);
  // The same over bf16 activations (a ring made for kBF16): out rounded once from the merged f32 rows; dqkv = dqkv +
  // the f32 gradient, rounded once. lse stays f32.
  void forward(Bf16* out, float* lse, const Bf16* qkv);
  void backward(Bf16* dqkv, const Bf16* dout, const Bf16* out, const float* lse, const Bf16* qkv);
  DType activations() const { return activations_; }

  // Bytes this rank sends (and receives) per ring step: a key / value block of the activations' type; the backward
  // adds its gradients (f32: gradient_block_bytes()).
  std::size_t block_bytes() const;
  std::size_t gradient_block_bytes() const;
  // Bytes this rank has sent round the ring since construction (what the exchanges were asked to move).
  std::uint64_t bytes_sent() const { return bytes_sent_; }
  // Bytes of the buffers the constructor allocated (comm_buffer, workspace).
  std::size_t comm_buffer_bytes() const;
  std::size_t workspace_bytes() const;
  const ContextChunks& chunks() const { return chunks_; }

 private:
  template <typename T>
  void run_forward(T* out, float* lse, const T* qkv);
  template <typename T>
  void run_backward(T* dqkv, const T* dout, const T* out, const float* lse, const T* qkv);
  // The key / value rows of chunk slot `slot` (0: the first chunk, 1: its mirror) of a block buffer.
  template <typename T>
  RowsOutOf<T> block_k(T* block, int slot) const;
  template <typename T>
  RowsOutOf<T> block_v(T* block, int slot) const;
  AttentionBlock block(int q_chunk, int kv_chunk) const;
  // This rank's keys and values, from qkv into the first block buffer (the block that travels first).
  void load_own_block(const float* qkv);
  void load_own_block(const Bf16* qkv);
  // fn(query slot, key slot, the block) for each pair of this rank's chunks and src's chunks in which some query sees
  // some key (0: the first chunk, 1: its mirror), queries outer: the order results are merged in.
  template <typename Fn>
  void for_each_block(int src, Fn&& fn) const;
  // Posts this step's exchange of `count` values of `dtype`: send `send` to the next rank, receive `recv` from the
  // previous one, after the compute stream's work so far.
  void exchange(const void* send, void* recv, std::size_t count, DType dtype);
  // Waits for the posted exchanges (bounded), naming the ring step in an error.
  void wait_exchange(const char* phase, int step);

  Communicator& cp_;
  AttentionKernels& kernels_;
  ContextChunks chunks_;
  int B_, C_, NH_, KVH_, L_;  // L_: local rows
  DType activations_;
  std::size_t kv_width_, row_;  // KVH D (a k or v row) and C + 2 KVH D (a qkv row)
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Event> ready_;
  Buffer kv_[2], dkv_[2], block_out_, block_lse_, di_;
  Buffer acc_;  // bf16 activations: the output's rows, then the query gradients, summed in f32
  std::uint64_t bytes_sent_ = 0;
};

}  // namespace strata
