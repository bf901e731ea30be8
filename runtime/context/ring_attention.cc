// RingAttention: the ring's steps, forward and backward, over the trainer's attention kernels.
#include "runtime/context/ring_attention.h"

#include <fmt/format.h>

#include "core/checked_math.h"
#include "core/error.h"

namespace strata {

RingAttention::RingAttention(Communicator& cp, AttentionKernels& kernels, const ContextChunks& chunks, int batch,
                             int width, int heads, int kv_heads)
    : cp_(cp),
      kernels_(kernels),
      chunks_(chunks),
      B_(batch),
      C_(width),
      NH_(heads),
      KVH_(kv_heads),
      L_(chunks.local_rows()) {
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, chunks.cp == cp.size() && chunks.rank == cp.rank(),
                    "ring attention: chunks of cp {} rank {}, but the group {} has {} ranks and this is its rank {}",
                    chunks.cp, chunks.rank, cp.name(), cp.size(), cp.rank());
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, batch >= 1 && heads >= 1 && width >= heads && width % heads == 0,
                    "ring attention: batch {} and width {} in {} heads (a positive multiple of the heads)", batch,
                    width, heads);
  STRATA_CHECK_CODE(ErrorCode::kInvalidArgument, kv_heads >= 1 && heads % kv_heads == 0,
                    "ring attention: {} key / value heads must divide the {} query heads (grouped-query attention)",
                    kv_heads, heads);
  kv_width_ = static_cast<std::size_t>(kv_heads) * (width / heads);
  row_ = static_cast<std::size_t>(width) + 2 * kv_width_;
  Device& dev = cp.device();
  const std::uint64_t kv_bytes =
      checked_product("ring attention's key / value block (4 x batch x rows x 2 x kv heads x head width)",
                      std::uint64_t{4}, B_, L_, 2, kv_width_);
  const std::uint64_t out_bytes =
      checked_product("ring attention's block output (4 x batch x rows x width)", std::uint64_t{4}, B_, L_, C_);
  const std::uint64_t stat_bytes =
      checked_product("ring attention's row statistics (4 x batch x heads x rows)", std::uint64_t{4}, B_, NH_, L_);
  const int blocks = chunks.cp > 1 ? 2 : 1;  // one rank has nothing to exchange: one block, no second buffer
  for (int i = 0; i < blocks; ++i) {
    kv_[i] = dev.allocate(kv_bytes, MemCategory::kCommBuffer);
    dkv_[i] = dev.allocate(kv_bytes, MemCategory::kCommBuffer);
  }
  block_out_ = dev.allocate(out_bytes, MemCategory::kWorkspace);
  block_lse_ = dev.allocate(stat_bytes, MemCategory::kWorkspace);
  di_ = dev.allocate(stat_bytes, MemCategory::kWorkspace);
  stream_ = dev.create_stream("ring attention");
  ready_ = dev.create_event();
}

RingAttention::~RingAttention() = default;

std::size_t RingAttention::block_bytes() const { return kv_[0].bytes(); }
std::size_t RingAttention::comm_buffer_bytes() const {
  return kv_[0].bytes() + kv_[1].bytes() + dkv_[0].bytes() + dkv_[1].bytes();
}
std::size_t RingAttention::workspace_bytes() const { return block_out_.bytes() + block_lse_.bytes() + di_.bytes(); }

RowsOut RingAttention::block_k(float* block, int slot) const {
  const std::size_t row = 2 * kv_width_;
  return RowsOut{block + static_cast<std::size_t>(slot) * chunks_.chunk_rows() * row, row, L_ * row};
}
RowsOut RingAttention::block_v(float* block, int slot) const {
  RowsOut k = block_k(block, slot);
  k.data += kv_width_;
  return k;
}

AttentionBlock RingAttention::block(int q_chunk, int kv_chunk) const {
  const int n = chunks_.chunk_rows();
  return AttentionBlock{B_, NH_, C_, n, q_chunk * n, n, kv_chunk * n, KVH_};
}

void RingAttention::exchange(const float* send, float* recv, std::size_t count) {
  // What is sent was written, and what is received into was last read, by the compute stream's work so far.
  cp_.device().compute_stream().record(*ready_);
  stream_->wait(*ready_);
  const int P = cp_.size(), r = cp_.rank();
  bytes_sent_ += count * sizeof(float);
  cp_.batch_send_recv({P2POp::send(send, count, DType::kF32, (r + 1) % P),
                       P2POp::recv(recv, count, DType::kF32, (r + P - 1) % P)},
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

void RingAttention::forward(float* out, float* lse, const float* qkv) {
  const int P = chunks_.cp, r = chunks_.rank, n = chunks_.chunk_rows();
  const std::size_t C = static_cast<std::size_t>(C_), L = static_cast<std::size_t>(L_), row = row_;
  const std::size_t block_floats = kv_[0].bytes() / sizeof(float);
  load_own_block(qkv);  // this rank's keys and values: the first block that travels
  bool first[2] = {true, true};  // a chunk's first block is written, the later ones merged
  int cur = 0;
  for (int s = 0; s < P; ++s) {
    if (s + 1 < P) exchange(kv_[cur].as<float>(), kv_[1 - cur].as<float>(), block_floats);
    float* kv = kv_[cur].as<float>();
    for_each_block((r + P - s) % P, [&](int qi, int ki, const AttentionBlock& blk) {
      const std::size_t q0 = static_cast<std::size_t>(qi) * n;
      const Rows q{qkv + q0 * row, row, L * row};
      const RowsOut o{out + q0 * C, C, L * C};
      const RowStatsOut l{lse + q0, L, NH_ * L};
      if (first[qi]) {
        kernels_.attention_block_forward(blk, o, l, q, block_k(kv, ki), block_v(kv, ki));
        first[qi] = false;
        return;
      }
      const RowsOut ob{block_out_.as<float>() + q0 * C, C, L * C};
      const RowStatsOut lb{block_lse_.as<float>() + q0, L, NH_ * L};
      kernels_.attention_block_forward(blk, ob, lb, q, block_k(kv, ki), block_v(kv, ki));
      kernels_.attention_merge(blk, o, l, ob, lb);
    });
    if (s + 1 < P) {
      wait_exchange("forward", s);
      cur = 1 - cur;
    }
  }
}

void RingAttention::backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv) {
  const int P = chunks_.cp, r = chunks_.rank, n = chunks_.chunk_rows();
  const std::size_t C = static_cast<std::size_t>(C_), L = static_cast<std::size_t>(L_), row = row_;
  const std::size_t block_floats = kv_[0].bytes() / sizeof(float);
  Device& dev = cp_.device();
  float* di = di_.as<float>();
  kernels_.attention_row_dot(AttentionBlock{B_, NH_, C_, L_, 0, L_, 0, KVH_}, RowStatsOut{di, L, NH_ * L},
                             Rows{dout, C, L * C}, Rows{out, C, L * C});
  load_own_block(qkv);
  dev.fill_zero(dkv_[0].data(), dkv_[0].bytes(), dev.compute_stream());
  int cur = 0;
  for (int s = 0; s < P; ++s) {
    if (s + 1 < P) exchange(kv_[cur].as<float>(), kv_[1 - cur].as<float>(), block_floats);
    float* kv = kv_[cur].as<float>();
    float* dkv = dkv_[cur].as<float>();
    for_each_block((r + P - s) % P, [&](int qi, int ki, const AttentionBlock& blk) {
      const std::size_t q0 = static_cast<std::size_t>(qi) * n;
      kernels_.attention_block_backward(blk, RowsOut{dqkv + q0 * row, row, L * row}, block_k(dkv, ki),
                                        block_v(dkv, ki), Rows{dout + q0 * C, C, L * C},
                                        RowStats{lse + q0, L, NH_ * L}, RowStats{di + q0, L, NH_ * L},
                                        Rows{qkv + q0 * row, row, L * row}, block_k(kv, ki), block_v(kv, ki));
    });
    if (P > 1) {
      // The block's gradients go on with it: after the last step each rank receives its own, complete.
      exchange(dkv, dkv_[1 - cur].as<float>(), block_floats);
      wait_exchange("backward", s);
      cur = 1 - cur;
    }
  }
  const std::size_t kv2 = 2 * kv_width_;
  kernels_.copy_rows(RowsOut{dqkv + C, row, L * row}, Rows{dkv_[cur].as<float>(), kv2, L * kv2}, B_, L_,
                     static_cast<int>(kv2), true);
}

}  // namespace strata
