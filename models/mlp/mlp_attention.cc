// MlpAttention: q = k = v = h through RingAttention, the residual around it.
#include "models/mlp/mlp_attention.h"

#include <algorithm>

#include "models/mlp/mlp.h"

namespace strata::mlp {

MlpAttention::MlpAttention(Communicator& cp, const ContextChunks& chunks, int sequences, int width)
    : device_(cp.device()),
      kernels_(make_kernels(cp.device())),
      ring_(cp, *kernels_, chunks, sequences, width, 1, 1),
      B_(sequences),
      L_(chunks.local_rows()),
      C_(width) {}

std::uint64_t MlpAttention::kept_bytes(int sequences, int local_rows, int width) {
  const std::uint64_t rows = static_cast<std::uint64_t>(sequences) * static_cast<std::uint64_t>(local_rows);
  return 4 * (2 * rows * static_cast<std::uint64_t>(width) + rows);
}

std::vector<float> MlpAttention::qkv_of(const float* h) const {
  const std::size_t rows = static_cast<std::size_t>(B_) * L_, C = static_cast<std::size_t>(C_);
  std::vector<float> qkv(rows * 3 * C);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t part = 0; part < 3; ++part) std::copy_n(h + i * C, C, qkv.data() + (i * 3 + part) * C);
  return qkv;
}

std::vector<float> MlpAttention::forward(const std::vector<float>& h, std::vector<KeptValues>& kept) {
  const std::size_t rows = static_cast<std::size_t>(B_) * L_, C = static_cast<std::size_t>(C_);
  STRATA_CHECK(h.size() == rows * C, "the attention's input has {} values; {} sequences of {} rows of {} are {}",
               h.size(), B_, L_, C_, rows * C);
  std::vector<float> out(rows * C), lse(rows);
  const std::vector<float> qkv = qkv_of(h.data());
  ring_.forward(out.data(), lse.data(), qkv.data());
  kept.clear();
  kept.emplace_back(device_, h);
  kept.emplace_back(device_, out);
  kept.emplace_back(device_, lse);
  std::vector<float> y(h);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] += out[i];
  return y;
}

std::vector<float> MlpAttention::backward(const std::vector<float>& dy, const std::vector<KeptValues>& kept) {
  const std::size_t rows = static_cast<std::size_t>(B_) * L_, C = static_cast<std::size_t>(C_);
  const auto* h = static_cast<const float*>(kept.at(0).data());
  const auto* out = static_cast<const float*>(kept.at(1).data());
  const auto* lse = static_cast<const float*>(kept.at(2).data());
  const std::vector<float> qkv = qkv_of(h);
  std::vector<float> dqkv(rows * 3 * C, 0.0f);
  ring_.backward(dqkv.data(), dy.data(), out, lse, qkv.data());
  std::vector<float> dh(dy);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t part = 0; part < 3; ++part)
      for (std::size_t c = 0; c < C; ++c) dh[i * C + c] += dqkv[(i * 3 + part) * C + c];
  return dh;
}

}  // namespace strata::mlp
