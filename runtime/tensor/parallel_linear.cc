// ColumnParallelLinear and RowParallelLinear: a product through the trainer's kernels and its collective.
#include "runtime/tensor/parallel_linear.h"

#include <utility>

#include "core/error.h"

namespace strata {

namespace {

template <typename T>
std::size_t bytes(int rows, int width) {
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(width) * sizeof(T);
}

// The rows of a forward pass: the group's micro-batch (0), or fewer without sequence parallelism.
int pass_rows(const TensorParallel& tp, int rows, const char* what) {
  if (rows == 0 || rows == tp.rows()) return tp.rows();
  STRATA_CHECK(rows > 0 && rows < tp.rows() && !tp.sequence_parallel(),
               "{}: a pass over {} of the group's {} rows (a pass takes 1 to {}{})", what, rows, tp.rows(), tp.rows(),
               tp.sequence_parallel() ? ", all of them under sequence parallelism" : "");
  return rows;
}

template <typename T>
const T* column_forward(TensorParallel& tp, LinearKernels& k, int in, int local_out, T* y, const T* x, T* gathered,
                        const float* w, const float* b, int rows = 0) {
  const int n = pass_rows(tp, rows, "a column-parallel product");
  const T* whole = tp.to_full(x, gathered, in);
  linear_forward(k, y, whole, w, b, n, in, local_out);
  return whole;
}

template <typename T>
const T* column_backward(TensorParallel& tp, LinearKernels& k, int in, int local_out, T* partial, T* local, float* dw,
                         float* db, const T* dy, const T* x_whole, const float* w) {
  k.zero(partial, bytes<T>(tp.rows(), in));
  linear_backward(k, partial, dw, db, dy, x_whole, w, tp.rows(), in, local_out);
  return tp.reduce_partial(partial, tp.sequence_parallel() ? local : partial, in);
}

template <typename T>
T* row_forward(TensorParallel& tp, LinearKernels& k, int local_in, int out, T* partial, T* local, const T* x,
               const float* w, const float* b, int rows = 0) {
  const int n = pass_rows(tp, rows, "a row-parallel product");
  linear_forward(k, partial, x, w, nullptr, n, local_in, out);
  T* y = partial;
  if (n == tp.rows())
    y = tp.reduce_partial(partial, tp.sequence_parallel() ? local : partial, out);
  else
    tp.sum(partial, static_cast<std::size_t>(n) * static_cast<std::size_t>(out));
  if (b) linear_add_bias(k, y, b, n == tp.rows() ? tp.local_rows() : n, out);
  return y;
}

template <typename T>
const T* row_backward(TensorParallel& tp, LinearKernels& k, int local_in, int out, T* dx, T* gathered, float* dw,
                      float* db, const T* dy, const T* x, const float* w) {
  const T* whole = tp.to_full(dy, gathered, out);
  k.zero(dx, bytes<T>(tp.rows(), local_in));
  linear_backward(k, dx, dw, db, whole, x, w, tp.rows(), local_in, out);
  return whole;
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(TensorParallel& tp, LinearKernels& k, int in, int out, int parts)
    : tp_(tp), k_(k), in_(in), out_(out), parts_(parts) {
  STRATA_CHECK(in >= 1 && out >= 1 && parts >= 1 && out % (parts * tp.size()) == 0,
               "column-parallel product [{}, {}] in {} parts: the output width must divide by parts x tp ({} x {})",
               in, out, parts, parts, tp.size());
  local_out_ = out / tp.size();
}

ColumnParallelLinear::ColumnParallelLinear(TensorParallel& tp, LinearKernels& k, int in,
                                           const std::vector<int>& part_widths, int atom)
    : tp_(tp), k_(k), in_(in), out_(0), parts_(static_cast<int>(part_widths.size())), atom_(atom) {
  STRATA_CHECK(in >= 1 && !part_widths.empty(), "column-parallel product of input width {} in {} parts", in,
               part_widths.size());
  for (int w : part_widths) {
    STRATA_CHECK(w >= 1 && (atom > 0 || w % tp.size() == 0),
                 "column-parallel product [{}, ...]: a part of width {} must divide by tp ({})", in, w, tp.size());
    out_ += w;
    part_widths_.push_back(w);
  }
  const TpSplit split = weight_split();
  split.validate("column-parallel product", tp.size());
  local_out_ = static_cast<int>(split.geometry(tp.size()).local);
}

std::size_t ColumnParallelLinear::shared_staging_floats() const {
  const TpGeometry g = weight_split().geometry(tp_.size());
  std::size_t width = 0;
  for (std::size_t p = 0; p < g.block.size(); ++p)
    if (g.share[p] > 1) width += g.block[p];
  return width * static_cast<std::size_t>(in_);
}

void ColumnParallelLinear::sum_shared_grads(float* dw, float* db, float* staging) {
  const std::size_t width = shared_staging_floats() / static_cast<std::size_t>(in_);
  if (width == 0) return;
  const TpGeometry g = weight_split().geometry(tp_.size());
  Device& dev = tp_.device();
  // Each row's shared pieces between the gradient (local columns) and the staging (global columns of those parts).
  auto move = [&](float* grad, std::size_t rows, bool into_staging) {
    std::size_t at = 0;  // the part's first column in the staging
    for (std::size_t p = 0; p < g.block.size(); ++p) {
      if (g.share[p] == 1) continue;
      const std::size_t bytes = g.piece[p] * 4;
      for (std::size_t r = 0; r < rows; ++r) {
        float* local = grad + r * static_cast<std::size_t>(local_out_) + g.local_begin[p];
        float* global = staging + r * width + at + g.first(p, tp_.rank());
        if (into_staging) dev.copy(global, local, bytes, dev.compute_stream());
        else dev.copy(local, global, bytes, dev.compute_stream());
      }
      at += g.block[p];
    }
  };
  for (const auto& [grad, rows] : {std::pair<float*, std::size_t>{dw, in_}, {db, 1}}) {
    if (grad == nullptr) continue;
    k_.zero(staging, rows * width * 4);
    move(grad, rows, true);
    tp_.sum(staging, rows * width);
    move(grad, rows, false);
  }
}

const float* ColumnParallelLinear::forward(float* y, const float* x, float* gathered, const float* w, const float* b,
                                           int rows) {
  return column_forward(tp_, k_, in_, local_out_, y, x, gathered, w, b, rows);
}

const Bf16* ColumnParallelLinear::forward(Bf16* y, const Bf16* x, Bf16* gathered, const float* w, const float* b) {
  return column_forward(tp_, k_, in_, local_out_, y, x, gathered, w, b);
}

const float* ColumnParallelLinear::backward(float* partial, float* local, float* dw, float* db, const float* dy,
                                            const float* x_whole, const float* w) {
  return column_backward(tp_, k_, in_, local_out_, partial, local, dw, db, dy, x_whole, w);
}

const Bf16* ColumnParallelLinear::backward(Bf16* partial, Bf16* local, float* dw, float* db, const Bf16* dy,
                                           const Bf16* x_whole, const float* w) {
  return column_backward(tp_, k_, in_, local_out_, partial, local, dw, db, dy, x_whole, w);
}

RowParallelLinear::RowParallelLinear(TensorParallel& tp, LinearKernels& k, int in, int out)
    : tp_(tp), k_(k), in_(in), out_(out) {
  STRATA_CHECK(in >= 1 && out >= 1 && in % tp.size() == 0,
               "row-parallel product [{}, {}]: the input width must divide by tp ({})", in, out, tp.size());
  local_in_ = in / tp.size();
}

float* RowParallelLinear::forward(float* partial, float* local, const float* x, const float* w, const float* b,
                                  int rows) {
  return row_forward(tp_, k_, local_in_, out_, partial, local, x, w, b, rows);
}

Bf16* RowParallelLinear::forward(Bf16* partial, Bf16* local, const Bf16* x, const float* w, const float* b) {
  return row_forward(tp_, k_, local_in_, out_, partial, local, x, w, b);
}

const float* RowParallelLinear::backward(float* dx, float* gathered, float* dw, float* db, const float* dy,
                                         const float* x, const float* w) {
  return row_backward(tp_, k_, local_in_, out_, dx, gathered, dw, db, dy, x, w);
}

const Bf16* RowParallelLinear::backward(Bf16* dx, Bf16* gathered, float* dw, float* db, const Bf16* dy, const Bf16* x,
                                        const float* w) {
  return row_backward(tp_, k_, local_in_, out_, dx, gathered, dw, db, dy, x, w);
}

}  // namespace strata
