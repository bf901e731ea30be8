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

template <typename T>
void TensorParallel::sum_of(T* x, std::size_t n, DType dtype) {
  if (size_ == 1 || n == 0) return;
  Stream& s = device_.compute_stream();
  timer_.span(s, [&] { group_->all_reduce(x, x, n, dtype, ReduceOp::kSum, s); });
  traffic_.all_reduce_bytes += n * sizeof(T);
  ++traffic_.calls;
}

void TensorParallel::sum(float* x, std::size_t n) { sum_of(x, n, DType::kF32); }
void TensorParallel::sum(Bf16* x, std::size_t n) { sum_of(x, n, DType::kBF16); }

void TensorParallel::max(float* x, std::size_t n) {
  if (size_ == 1 || n == 0) return;
  Stream& s = device_.compute_stream();
  timer_.span(s, [&] { group_->all_reduce(x, x, n, DType::kF32, ReduceOp::kMax, s); });
  traffic_.all_reduce_bytes += n * sizeof(float);
  ++traffic_.calls;
}

template <typename T>
const T* TensorParallel::to_full_of(const T* local, T* full, int C, DType dtype) {
  if (!sp_) return local;
  Stream& s = device_.compute_stream();
  const std::size_t piece = static_cast<std::size_t>(T_ / size_) * C;  // one row's positions on one rank
  const std::size_t count = static_cast<std::size_t>(B_) * piece;     // one rank's block
  if (size_ == 1) {
    if (full != local) device_.copy(full, local, count * sizeof(T), s);
    return full;
  }
  T* gathered = B_ == 1 ? full : staging_.as<T>();
  timer_.span(s, [&] { group_->all_gather(local, gathered, count, dtype, s); });
  traffic_.all_gather_bytes += count * size_ * sizeof(T);
  ++traffic_.calls;
  if (B_ > 1)  // [tp][B][T/tp][C] -> [B][tp][T/tp][C]
    for (int r = 0; r < size_; ++r)
      for (int b = 0; b < B_; ++b)
        device_.copy(full + (static_cast<std::size_t>(b) * size_ + r) * piece,
                     gathered + (static_cast<std::size_t>(r) * B_ + b) * piece, piece * sizeof(T), s);
  return full;
}

template <typename T>
T* TensorParallel::reduce_partial_of(T* partial, T* local, int C, DType dtype) {
  if (!sp_) {
    sum_of(partial, static_cast<std::size_t>(B_) * T_ * C, dtype);
    return partial;
  }
  Stream& s = device_.compute_stream();
  const std::size_t piece = static_cast<std::size_t>(T_ / size_) * C;
  const std::size_t count = static_cast<std::size_t>(B_) * piece;
  if (size_ == 1) {
    if (local != partial) device_.copy(local, partial, count * sizeof(T), s);
    return local;
  }
  const T* send = partial;
  if (B_ > 1) {  // [B][tp][T/tp][C] -> [tp][B][T/tp][C]
    T* staged = staging_.as<T>();
    for (int r = 0; r < size_; ++r)
      for (int b = 0; b < B_; ++b)
        device_.copy(staged + (static_cast<std::size_t>(r) * B_ + b) * piece,
                     partial + (static_cast<std::size_t>(b) * size_ + r) * piece, piece * sizeof(T), s);
    send = staged;
  }
  timer_.span(s, [&] { group_->reduce_scatter(send, local, count, dtype, ReduceOp::kSum, s); });
  traffic_.reduce_scatter_bytes += count * size_ * sizeof(T);
  ++traffic_.calls;
  return local;
}

const float* TensorParallel::to_full(const float* local, float* full, int C) {
  return to_full_of(local, full, C, DType::kF32);
}
const Bf16* TensorParallel::to_full(const Bf16* local, Bf16* full, int C) {
  return to_full_of(local, full, C, DType::kBF16);
}
float* TensorParallel::reduce_partial(float* partial, float* local, int C) {
  return reduce_partial_of(partial, local, C, DType::kF32);
}
Bf16* TensorParallel::reduce_partial(Bf16* partial, Bf16* local, int C) {
  return reduce_partial_of(partial, local, C, DType::kBF16);
}

}  // namespace strata
