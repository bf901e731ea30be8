// TensorParallel: the collectives of a tensor-parallel group (Megatron-LM's f and g operators, and with sequence
// parallelism the all-gather / reduce-scatter along the sequence), issued on the device's compute stream so they are
// ordered with the kernels around them and hold no buffer past its use. The layers of parallel_linear.h and
// vocab_parallel.h call them; a trainer calls them directly for what those do not cover (a LayerNorm's gradient
// under sequence parallelism: sum()).
//
// Layout: a micro-batch is B rows of T tokens, [B, T, C] row-major. Under sequence parallelism tp rank r holds
// positions [r T/tp, (r+1) T/tp) of every row, [B, T/tp, C]; the collectives exchange contiguous rank blocks
// [tp][B][T/tp][C], so a gather or a scatter with B > 1 permutes through a staging buffer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "collectives/communicator.h"
#include "core/device.h"
#include "core/event_timer.h"

namespace strata {

// Bytes and calls per step of each kind of tp collective (the buffer sizes: an all-reduce's buffer, an all-gather's
// output, a reduce-scatter's input), and the milliseconds spent in them, from events around each on the compute
// stream (core/event_timer.h: the GPU's time on CUDA; on the CPU, where they run inline, the caller's wall time).
struct TpTraffic {
  std::uint64_t all_reduce_bytes = 0, all_gather_bytes = 0, reduce_scatter_bytes = 0;
  std::uint64_t calls = 0;
  double comm_ms = 0;
  std::uint64_t total() const { return all_reduce_bytes + all_gather_bytes + reduce_scatter_bytes; }
};

class TensorParallel {
 public:
  // group: the tp group (null: tp 1). B rows of T tokens; C channels (the widest row the sequence ops move).
  TensorParallel(Device& device, Communicator* group, bool sequence_parallel, int B, int T, int C);

  int size() const { return size_; }
  int rank() const { return rank_; }
  Device& device() const { return device_; }
  bool sequence_parallel() const { return sp_; }
  // Rows of a micro-batch, B * T: what a column-parallel product's output and a row-parallel one's partial hold.
  int rows() const { return B_ * T_; }
  // Rows of the sequence-sharded regions on this rank: B * T / tp under sequence parallelism, else B * T; and the
  // first position this rank holds.
  int local_rows() const { return sp_ ? B_ * (T_ / size_) : B_ * T_; }
  int local_positions() const { return sp_ ? T_ / size_ : T_; }
  int first_position() const { return sp_ ? rank_ * (T_ / size_) : 0; }

  // In place over the group (nothing at tp 1). sum() is f's backward (the input gradient of a column-parallel
  // product) and g's forward (the output of a row-parallel one) without sequence parallelism.
  void sum(float* x, std::size_t n);
  void max(float* x, std::size_t n);
  // A sequence-sharded [B, T/tp, C] to the whole [B, T, C] in `full`; returns `full`. Without sequence parallelism
  // `local` is already whole: returns it.
  const float* to_full(const float* local, float* full, int C);
  // A partial sum [B, T, C] (each tp rank's share of a row-parallel product) to its reduction in this rank's rows:
  // a reduce-scatter along the sequence into `local` (returned), or without sequence parallelism an all-reduce in
  // place (returns `partial`).
  float* reduce_partial(float* partial, float* local, int C);
  // The same over bf16 activations: half the bytes on the wire; a sum adds the ranks' values in f32 and rounds once
  // (the communicator's 16-bit reduction).
  void sum(Bf16* x, std::size_t n);
  const Bf16* to_full(const Bf16* local, Bf16* full, int C);
  Bf16* reduce_partial(Bf16* partial, Bf16* local, int C);

  // Folds in the time of the collectives that have completed (on CUDA, synchronize the compute stream first to count
  // them all).
  const TpTraffic& traffic() {
    traffic_.comm_ms += timer_.collect();
    return traffic_;
  }
  void reset_traffic() {
    timer_.collect();  // spans of the last step that were not counted stay out of the next one
    traffic_ = {};
  }
  // Bytes of staging this object holds (the permutation buffer; 0 without sequence parallelism or with B == 1).
  std::size_t staging_bytes() const { return staging_.bytes(); }

 private:
  // The collectives over elements of `dtype` (f32 or bf16), `T` its storage type.
  template <typename T>
  void sum_of(T* x, std::size_t n, DType dtype);
  template <typename T>
  const T* to_full_of(const T* local, T* full, int C, DType dtype);
  template <typename T>
  T* reduce_partial_of(T* partial, T* local, int C, DType dtype);

  Device& device_;
  Communicator* group_;
  int size_ = 1, rank_ = 0;
  bool sp_;
  int B_, T_;
  Buffer staging_;
  TpTraffic traffic_;
  EventTimer timer_;
};

}  // namespace strata
