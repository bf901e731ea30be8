// MlpAttention: q = k = v = h through RingAttention, the residual around it.
#include "models/mlp/mlp_attention.h"

#include <algorithm>

#include "models/mlp/mlp.h"

namespace strata::mlp {

MlpAttention::MlpAttention(Communicator& cp, const ContextChunks& chunks, int sequences, int width, DType activations)
    : device_(cp.device()),
      kernels_(make_kernels(cp.device())),
      ring_(cp, *kernels_, chunks, sequences, width, 1, 1, activations),
      B_(sequences),
      L_(chunks.local_rows()),
      C_(width) {}

std::uint64_t MlpAttention::kept_bytes() const {
  const std::uint64_t rows = static_cast<std::uint64_t>(B_) * static_cast<std::uint64_t>(L_);
  return dtype_size(ring_.activations()) * 2 * rows * static_cast<std::uint64_t>(C_) + 4 * rows;
}

template <typename T>
std::vector<T> MlpAttention::qkv_of(const T* h) const {
  const std::size_t rows = static_cast<std::size_t>(B_) * L_, C = static_cast<std::size_t>(C_);
  std::vector<T> qkv(rows * 3 * C);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t part = 0; part < 3; ++part) std::copy_n(h + i * C, C, qkv.data() + (i * 3 + part) * C);
  return qkv;
}

template <typename T>
std::vector<T> MlpAttention::forward(const std::vector<T>& h, std::vector<KeptValues>& kept) {
  const std::size_t rows = static_cast<std::size_t>(B_) * L_, C = static_cast<std::size_t>(C_);
  STRATA_CHECK(h.size() == rows * C, "the attention's input has {} values; {} sequences of {} rows of {} are {}",
               h.size(), B_, L_, C_, rows * C);
  std::vector<T> out(rows * C);
  std::vector<float> lse(rows);
  const std::vector<T> qkv = qkv_of(h.data());
  ring_.forward(out.data(), lse.data(), qkv.data());
  kept.clear();
  kept.emplace_back(device_, h);
  kept.emplace_back(device_, out);
  kept.emplace_back(device_, lse);
  std::vector<T> y(h.size());
  for (std::size_t i = 0; i < y.size(); ++i) store_f32(y[i], f32_of(h[i]) + f32_of(out[i]));
  return y;
}

template <typename T>
std::vector<T> MlpAttention::backward(const std::vector<T>& dy, const std::vector<KeptValues>& kept) {
  const std::size_t rows = static_cast<std::size_t>(B_) * L_, C = static_cast<std::size_t>(C_);
  const auto* h = static_cast<const T*>(kept.at(0).data());
  const auto* out = static_cast<const T*>(kept.at(1).data());
  const auto* lse = static_cast<const float*>(kept.at(2).data());
  const std::vector<T> qkv = qkv_of(h);
  std::vector<T> dqkv(rows * 3 * C, T{});
  ring_.backward(dqkv.data(), dy.data(), out, lse, qkv.data());
  std::vector<T> dh(dy.size());
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t c = 0; c < C; ++c) {
      float g = f32_of(dy[i * C + c]);
      for (std::size_t part = 0; part < 3; ++part) g += f32_of(dqkv[(i * 3 + part) * C + c]);
      store_f32(dh[i * C + c], g);
    }
  return dh;
}

template std::vector<float> MlpAttention::forward(const std::vector<float>&, std::vector<KeptValues>&);
template std::vector<Bf16> MlpAttention::forward(const std::vector<Bf16>&, std::vector<KeptValues>&);
template std::vector<float> MlpAttention::backward(const std::vector<float>&, const std::vector<KeptValues>&);
template std::vector<Bf16> MlpAttention::backward(const std::vector<Bf16>&, const std::vector<KeptValues>&);

}  // namespace strata::mlp
