// TensorParallel: sums, maxima, and the sequence gather / scatter of a tensor-parallel group.
#include "runtime/tensor/tensor_parallel.h"

#include "core/error.h"

namespace strata {

TensorParallel::TensorParallel(Device& device, Communicator* group, bool sequence_parallel, int B, int T, int C)
    : device_(device), group_(group), sp_(sequence_parallel), B_(B), T_(T), timer_(device) {
  if (group_) {
    size_ = group_->size();
    rank_ = group_->rank();
  }
  STRATA_CHECK(!sp_ || T % size_ == 0,
               "sequence parallelism: the sequence length {} must divide by the tensor-parallel degree {}", T, size_);
  if (sp_ && size_ > 1 && B > 1)
    staging_ = device_.allocate(static_cast<std::size_t>(B) * T * C * sizeof(float), MemCategory::kWorkspace);
}

void TensorParallel::sum(float* x, std::size_t n) {
  if (size_ == 1 || n == 0) return;
  Stream& s = device_.compute_stream();
  timer_.span(s, [&] { group_->all_reduce(x, x, n, DType::kF32, ReduceOp::kSum, s); });
  traffic_.all_reduce_bytes += n * sizeof(float);
  ++traffic_.calls;
}

void TensorParallel::max(float* x, std::size_t n) {
  if (size_ == 1 || n == 0) return;
  Stream& s = device_.compute_stream();
  timer_.span(s, [&] { group_->all_reduce(x, x, n, DType::kF32, ReduceOp::kMax, s); });
  traffic_.all_reduce_bytes += n * sizeof(float);
  ++traffic_.calls;
}

const float* TensorParallel::to_full(const float* local, float* full, int C) {
  if (!sp_) return local;
  Stream& s = device_.compute_stream();
  const std::size_t piece = static_cast<std::size_t>(T_ / size_) * C;  // one row's positions on one rank
  const std::size_t count = static_cast<std::size_t>(B_) * piece;     // one rank's block
  if (size_ == 1) {
    if (full != local) device_.copy(full, local, count * sizeof(float), s);
    return full;
  }
  float* gathered = B_ == 1 ? full : staging_.as<float>();
  timer_.span(s, [&] { group_->all_gather(local, gathered, count, DType::kF32, s); });
  traffic_.all_gather_bytes += count * size_ * sizeof(float);
  ++traffic_.calls;
  if (B_ > 1)  // [tp][B][T/tp][C] -> [B][tp][T/tp][C]
    for (int r = 0; r < size_; ++r)
      for (int b = 0; b < B_; ++b)
        device_.copy(full + (static_cast<std::size_t>(b) * size_ + r) * piece,
                     gathered + (static_cast<std::size_t>(r) * B_ + b) * piece, piece * sizeof(float), s);
  return full;
}

float* TensorParallel::reduce_partial(float* partial, float* local, int C) {
  if (!sp_) {
    sum(partial, static_cast<std::size_t>(B_) * T_ * C);
    return partial;
  }
  Stream& s = device_.compute_stream();
  const std::size_t piece = static_cast<std::size_t>(T_ / size_) * C;
  const std::size_t count = static_cast<std::size_t>(B_) * piece;
  if (size_ == 1) {
    if (local != partial) device_.copy(local, partial, count * sizeof(float), s);
    return local;
  }
  const float* send = partial;
  if (B_ > 1) {  // [B][tp][T/tp][C] -> [tp][B][T/tp][C]
    float* staged = staging_.as<float>();
    for (int r = 0; r < size_; ++r)
      for (int b = 0; b < B_; ++b)
        device_.copy(staged + (static_cast<std::size_t>(r) * B_ + b) * piece,
                     partial + (static_cast<std::size_t>(b) * size_ + r) * piece, piece * sizeof(float), s);
    send = staged;
  }
  timer_.span(s, [&] { group_->reduce_scatter(send, local, count, DType::kF32, ReduceOp::kSum, s); });
  traffic_.reduce_scatter_bytes += count * size_ * sizeof(float);
  ++traffic_.calls;
  return local;
}

}  // namespace strata
