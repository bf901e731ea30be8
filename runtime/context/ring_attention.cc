// RingAttention: the ring's steps, forward and backward, over the trainer's attention kernels.
#include "runtime/context/ring_attention.h"

#include <fmt/format.h>

#include <type_traits>

#include "core/checked_math.h"
#include "core/error.h"

namespace strata {

RingAttention::RingAttention(Communicator& cp, AttentionKernels& kernels, const ContextChunks& chunks, int batch,
                             int width, int heads, int kv_heads, DType activations)
    : cp_(cp),
      kernels_(kernels),
      chunks_(chunks),
      B_(batch),
      C_(width),
      NH_(heads),
      KVH_(kv_heads),
      L_(chunks.local_rows()),
      activations_(activations) {
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, chunks.cp == cp.size() && chunks.rank == cp.rank(),
                    "ring attention: chunks of cp {} rank {}, but the group {} has {} ranks and this is its rank {}",
                    chunks.cp, chunks.rank, cp.name(), cp.size(), cp.rank());
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, batch >= 1 && heads >= 1 && width >= heads && width % heads == 0,
                    "ring attention: batch {} and width {} in {} heads (a positive multiple of the heads)", batch,
                    width, heads);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, kv_heads >= 1 && heads % kv_heads == 0,
                    "ring attention: {} key / value heads must divide the {} query heads (grouped-query attention)",
                    kv_heads, heads);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, activations == DType::kF32 || activations == DType::kBF16,
                    "ring attention: activations of {}; f32 or bf16", dtype_name(activations));
  kv_width_ = static_cast<std::size_t>(kv_heads) * (width / heads);
  row_ = static_cast<std::size_t>(width) + 2 * kv_width_;
  Device& dev = cp.device();
  const std::uint64_t dkv_bytes =
      checked_product("ring attention's key / value block (4 x batch x rows x 2 x kv heads x head width)",
                      std::uint64_t{4}, B_, L_, 2, kv_width_);
  const std::uint64_t kv_bytes = dkv_bytes / 4 * dtype_size(activations);
  const std::uint64_t out_bytes =
      checked_product("ring attention's block output (4 x batch x rows x width)", std::uint64_t{4}, B_, L_, C_);
  const std::uint64_t stat_bytes =
      checked_product("ring attention's row statistics (4 x batch x heads x rows)", std::uint64_t{4}, B_, NH_, L_);
  const int blocks = chunks.cp > 1 ? 2 : 1;  // one rank has nothing to exchange: one block, no second buffer
  for (int i = 0; i < blocks; ++i) {
    kv_[i] = dev.allocate(kv_bytes, MemCategory::kCommBuffer);
    dkv_[i] = dev.allocate(dkv_bytes, MemCategory::kCommBuffer);
  }
  block_out_ = dev.allocate(out_bytes, MemCategory::kWorkspace);
  block_lse_ = dev.allocate(stat_bytes, MemCategory::kWorkspace);
  di_ = dev.allocate(stat_bytes, MemCategory::kWorkspace);
  if (activations == DType::kBF16) acc_ = dev.allocate(out_bytes, MemCategory::kWorkspace);
  stream_ = dev.create_stream("ring attention");
  ready_ = dev.create_event();
}

RingAttention::~RingAttention() = default;

std::size_t RingAttention::block_bytes() const { return kv_[0].bytes(); }
std::size_t RingAttention::gradient_block_bytes() const { return dkv_[0].bytes(); }
std::size_t RingAttention::comm_buffer_bytes() const {
  return kv_[0].bytes() + kv_[1].bytes() + dkv_[0].bytes() + dkv_[1].bytes();
}
std::size_t RingAttention::workspace_bytes() const {
  return block_out_.bytes() + block_lse_.bytes() + di_.bytes() + acc_.bytes();
}

template <typename T>
RowsOutOf<T> RingAttention::block_k(T* block, int slot) const {
  const std::size_t row = 2 * kv_width_;
  return RowsOutOf<T>{block + static_cast<std::size_t>(slot) * chunks_.chunk_rows() * row, row, L_ * row};
}
template <typename T>
RowsOutOf<T> RingAttention::block_v(T* block, int slot) const {
  RowsOutOf<T> k = block_k(block, slot);
  k.data += kv_width_;
  return k;
}

AttentionBlock RingAttention::block(int q_chunk, int kv_chunk) const {
  const int n = chunks_.chunk_rows();
  return AttentionBlock{B_, NH_, C_, n, q_chunk * n, n, kv_chunk * n, KVH_};
}

void RingAttention::exchange(const void* send, void* recv, std::size_t count, DType dtype) {
  // What is sent was written, and what is received into was last read, by the compute stream's work so far.
  cp_.device().compute_stream().record(*ready_);
  stream_->wait(*ready_);
  const int P = cp_.size(), r = cp_.rank();
  bytes_sent_ += count * dtype_size(dtype);
  cp_.batch_send_recv({P2POp::send(send, count, dtype, (r + 1) % P), P2POp::recv(recv, count, dtype, (r + P - 1) % P)},
                      *stream_);
}

void RingAttention::wait_exchange(const char* phase, int step) {
  try {
    stream_->synchronize();
  } catch (const Error& e) {
    const int P = cp_.size(), r = cp_.rank();
    throw Error(e.code(), fmt::format("{}\nring attention ({}): cp rank {} of {} in group {} was exchanging the blocks "
                                      "of step {} of {} with rank {} (next) and rank {} (previous)",
                                      e.what(), phase, r, P, cp_.name(), step, P, (r + 1) % P, (r + P - 1) % P));
  }
}

void RingAttention::load_own_block(const float* qkv) {
  const std::size_t L = static_cast<std::size_t>(L_), kv2 = 2 * kv_width_;
  kernels_.copy_rows(RowsOut{kv_[0].as<float>(), kv2, L * kv2}, Rows{qkv + C_, row_, L * row_}, B_, L_,
                     static_cast<int>(kv2), false);
}
void RingAttention::load_own_block(const Bf16* qkv) {
  const std::size_t L = static_cast<std::size_t>(L_), kv2 = 2 * kv_width_;
  kernels_.copy_rows_bf16(Bf16RowsOut{kv_[0].as<Bf16>(), kv2, L * kv2}, Bf16Rows{qkv + C_, row_, L * row_}, B_, L_,
                          static_cast<int>(kv2));
}

template <typename Fn>
void RingAttention::for_each_block(int src, Fn&& fn) const {
  const int r = chunks_.rank;
  for (int qi = 0; qi < 2; ++qi) {
    const int qc = qi == 0 ? chunks_.first_chunk(r) : chunks_.second_chunk(r);
    for (int ki = 0; ki < 2; ++ki) {
      const int kc = ki == 0 ? chunks_.first_chunk(src) : chunks_.second_chunk(src);
      if (kc > qc) continue;  // every key after every query: nothing seen
      fn(qi, ki, block(qc, kc));
    }
  }
}

namespace {

// The attention kernels by activation type: the f32 methods, or the *_bf16 ones over bf16 rows.
void block_forward(AttentionKernels& k, const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Rows q, Rows kr,
                   Rows v) {
  k.attention_block_forward(blk, out, lse, q, kr, v);
}
void block_forward(AttentionKernels& k, const AttentionBlock& blk, RowsOut out, RowStatsOut lse, Bf16Rows q,
                   Bf16Rows kr, Bf16Rows v) {
  k.attention_block_forward_bf16(blk, out, lse, q, kr, v);
}
void block_backward(AttentionKernels& k, const AttentionBlock& blk, RowsOut dq, RowsOut dk, RowsOut dv, Rows dout,
                    RowStats lse, RowStats di, Rows q, Rows kr, Rows v) {
  k.attention_block_backward(blk, dq, dk, dv, dout, lse, di, q, kr, v);
}
void block_backward(AttentionKernels& k, const AttentionBlock& blk, RowsOut dq, RowsOut dk, RowsOut dv, Bf16Rows dout,
                    RowStats lse, RowStats di, Bf16Rows q, Bf16Rows kr, Bf16Rows v) {
  k.attention_block_backward_bf16(blk, dq, dk, dv, dout, lse, di, q, kr, v);
}
void row_dot(AttentionKernels& k, const AttentionBlock& blk, RowStatsOut di, Rows dout, Rows out) {
  k.attention_row_dot(blk, di, dout, out);
}
void row_dot(AttentionKernels& k, const AttentionBlock& blk, RowStatsOut di, Bf16Rows dout, Bf16Rows out) {
  k.attention_row_dot_bf16(blk, di, dout, out);
}

template <typename T>
constexpr DType kDType = std::is_same_v<T, Bf16> ? DType::kBF16 : DType::kF32;

}  // namespace

void RingAttention::forward(float* out, float* lse, const float* qkv) { run_forward(out, lse, qkv); }
void RingAttention::forward(Bf16* out, float* lse, const Bf16* qkv) { run_forward(out, lse, qkv); }
void RingAttention::backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv) {
  run_backward(dqkv, dout, out, lse, qkv);
}
void RingAttention::backward(Bf16* dqkv, const Bf16* dout, const Bf16* out, const float* lse, const Bf16* qkv) {
  run_backward(dqkv, dout, out, lse, qkv);
}

template <typename T>
void RingAttention::run_forward(T* out, float* lse, const T* qkv) {
  constexpr bool kF32 = std::is_same_v<T, float>;
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, kDType<T> == activations_,
                    "ring attention: forward over {} activations on a ring made for {}", dtype_name(kDType<T>),
                    dtype_name(activations_));
  const int P = chunks_.cp, r = chunks_.rank, n = chunks_.chunk_rows();
  const std::size_t C = static_cast<std::size_t>(C_), L = static_cast<std::size_t>(L_), row = row_;
  const std::size_t block_values = kv_[0].bytes() / sizeof(T);
  float* merged = nullptr;  // the output's rows, merged in f32: out itself, or the bf16 ring's accumulator
  if constexpr (kF32)
    merged = out;
  else
    merged = acc_.as<float>();
  load_own_block(qkv);  // this rank's keys and values: the first block that travels
  bool first[2] = {true, true};  // a chunk's first block is written, the later ones merged
  int cur = 0;
  for (int s = 0; s < P; ++s) {
    if (s + 1 < P) exchange(kv_[cur].data(), kv_[1 - cur].data(), block_values, kDType<T>);
    T* kv = kv_[cur].as<T>();
    for_each_block((r + P - s) % P, [&](int qi, int ki, const AttentionBlock& blk) {
      const std::size_t q0 = static_cast<std::size_t>(qi) * n;
      const RowsOf<T> q{qkv + q0 * row, row, L * row};
      const RowsOut o{merged + q0 * C, C, L * C};
      const RowStatsOut l{lse + q0, L, NH_ * L};
      if (first[qi]) {
        block_forward(kernels_, blk, o, l, q, block_k(kv, ki), block_v(kv, ki));
        first[qi] = false;
        return;
      }
      const RowsOut ob{block_out_.as<float>() + q0 * C, C, L * C};
      const RowStatsOut lb{block_lse_.as<float>() + q0, L, NH_ * L};
      block_forward(kernels_, blk, ob, lb, q, block_k(kv, ki), block_v(kv, ki));
      kernels_.attention_merge(blk, o, l, ob, lb);
    });
    if (s + 1 < P) {
      wait_exchange("forward", s);
      cur = 1 - cur;
    }
  }
  if constexpr (!kF32) kernels_.round_rows_bf16(Bf16RowsOut{out, C, L * C}, Rows{merged, C, L * C}, B_, L_, C_, false);
}

template <typename T>
void RingAttention::run_backward(T* dqkv, const T* dout, const T* out, const float* lse, const T* qkv) {
  constexpr bool kF32 = std::is_same_v<T, float>;
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, kDType<T> == activations_,
                    "ring attention: backward over {} activations on a ring made for {}", dtype_name(kDType<T>),
                    dtype_name(activations_));
  const int P = chunks_.cp, r = chunks_.rank, n = chunks_.chunk_rows();
  const std::size_t C = static_cast<std::size_t>(C_), L = static_cast<std::size_t>(L_), row = row_;
  const std::size_t block_values = kv_[0].bytes() / sizeof(T), gradient_values = dkv_[0].bytes() / sizeof(float);
  Device& dev = cp_.device();
  float* di = di_.as<float>();
  row_dot(kernels_, AttentionBlock{B_, NH_, C_, L_, 0, L_, 0, KVH_}, RowStatsOut{di, L, NH_ * L},
          RowsOf<T>{dout, C, L * C}, RowsOf<T>{out, C, L * C});
  load_own_block(qkv);
  dev.fill_zero(dkv_[0].data(), dkv_[0].bytes(), dev.compute_stream());
  RowsOut dq{nullptr, row, L * row};  // the query gradients: into dqkv (f32), or summed in the accumulator (bf16)
  if constexpr (kF32) {
    dq.data = dqkv;
  } else {
    dq = RowsOut{acc_.as<float>(), C, L * C};
    dev.fill_zero(acc_.data(), acc_.bytes(), dev.compute_stream());
  }
  int cur = 0;
  for (int s = 0; s < P; ++s) {
    if (s + 1 < P) exchange(kv_[cur].data(), kv_[1 - cur].data(), block_values, kDType<T>);
    T* kv = kv_[cur].as<T>();
    float* dkv = dkv_[cur].as<float>();
    for_each_block((r + P - s) % P, [&](int qi, int ki, const AttentionBlock& blk) {
      const std::size_t q0 = static_cast<std::size_t>(qi) * n;
      block_backward(kernels_, blk, RowsOut{dq.data + q0 * dq.row_stride, dq.row_stride, dq.batch_stride},
                     block_k(dkv, ki), block_v(dkv, ki), RowsOf<T>{dout + q0 * C, C, L * C},
                     RowStats{lse + q0, L, NH_ * L}, RowStats{di + q0, L, NH_ * L},
                     RowsOf<T>{qkv + q0 * row, row, L * row}, block_k(kv, ki), block_v(kv, ki));
    });
    if (P > 1) {
      // The block's gradients go on with it: after the last step each rank receives its own, complete.
      exchange(dkv, dkv_[1 - cur].data(), gradient_values, DType::kF32);
      wait_exchange("backward", s);
      cur = 1 - cur;
    }
  }
  const std::size_t kv2 = 2 * kv_width_;
  const Rows dkv{dkv_[cur].as<float>(), kv2, L * kv2};
  if constexpr (kF32) {
    kernels_.copy_rows(RowsOut{dqkv + C, row, L * row}, dkv, B_, L_, static_cast<int>(kv2), true);
  } else {
    kernels_.round_rows_bf16(Bf16RowsOut{dqkv, row, L * row}, Rows{dq.data, C, L * C}, B_, L_, C_, true);
    kernels_.round_rows_bf16(Bf16RowsOut{dqkv + C, row, L * row}, dkv, B_, L_, static_cast<int>(kv2), true);
  }
}

}  // namespace strata
