// CPU kernels of the tensor-parallel GPT: OpenMP over rows, sums in double as cpu_ops.cc's cross-entropy.
#include "kernels/cpu/tp_ops.h"

#include <cmath>
#include <cstring>
#include <type_traits>

namespace strata::cpu {

namespace {

template <typename T>
void embedding_forward_of(T* out, const int32_t* tokens, const float* wte, int v_begin, int v_count, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    T* o = out + static_cast<std::size_t>(n) * C;
    const int v = tokens[n] - v_begin;
    if (v >= 0 && v < v_count) {
      const float* w = wte + static_cast<std::size_t>(v) * C;
      if constexpr (std::is_same_v<T, float>)
        std::memcpy(o, w, static_cast<std::size_t>(C) * sizeof(float));
      else
        for (int c = 0; c < C; ++c) store_f32(o[c], w[c]);
    } else {
      std::memset(static_cast<void*>(o), 0, static_cast<std::size_t>(C) * sizeof(T));
    }
  }
}

template <typename T>
void embedding_backward_of(float* dwte, const T* dout, const int32_t* tokens, int v_begin, int v_count, int N, int C) {
  // Rows in order (two rows may hit the same token): serial over rows, as encoder_backward.
  for (int n = 0; n < N; ++n) {
    const int v = tokens[n] - v_begin;
    if (v < 0 || v >= v_count) continue;
    float* d = dwte + static_cast<std::size_t>(v) * C;
    const T* g = dout + static_cast<std::size_t>(n) * C;
    for (int c = 0; c < C; ++c) d[c] += f32_of(g[c]);
  }
}

template <typename T>
void vocab_max_of(float* row_max, const T* logits, int N, int V, int valid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = logits + static_cast<std::size_t>(n) * V;
    float m = -INFINITY;
    for (int v = 0; v < valid; ++v) m = std::fmax(m, f32_of(x[v]));
    row_max[n] = m;
  }
}

template <typename T>
void vocab_sumexp_of(float* stats, const T* logits, const float* row_max, const int32_t* targets, int v_begin, int N,
                     int V, int valid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const T* x = logits + static_cast<std::size_t>(n) * V;
    double s = 0;
    for (int v = 0; v < valid; ++v) s += std::exp(static_cast<double>(f32_of(x[v])) - row_max[n]);
    stats[n] = static_cast<float>(s);
    const int t = targets[n] - v_begin;
    stats[N + n] = t >= 0 && t < valid ? f32_of(x[t]) : 0.0f;
  }
}

template <typename T>
void vocab_crossentropy_of(float* losses, T* dlogits, const T* logits, const float* row_max, const float* stats,
                           const int32_t* targets, int v_begin, int N, int V, int valid, float dscale) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const double sum = stats[n], m = row_max[n];
    losses[n] = static_cast<float>(std::log(sum) + m - static_cast<double>(stats[N + n]));
    if (!dlogits) continue;
    const T* x = logits + static_cast<std::size_t>(n) * V;
    T* d = dlogits + static_cast<std::size_t>(n) * V;
    const int t = targets[n] - v_begin;
    for (int v = 0; v < valid; ++v) {
      const double p = std::exp(static_cast<double>(f32_of(x[v])) - m) / sum;
      store_f32(d[v], static_cast<float>((p - (v == t ? 1.0 : 0.0)) * dscale));
    }
    for (int v = valid; v < V; ++v) store_f32(d[v], 0.0f);
  }
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, int v_begin, int v_count, int N, int C) {
  embedding_forward_of(out, tokens, wte, v_begin, v_count, N, C);
}
void embedding_forward(Bf16* out, const int32_t* tokens, const float* wte, int v_begin, int v_count, int N, int C) {
  embedding_forward_of(out, tokens, wte, v_begin, v_count, N, C);
}
void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int v_begin, int v_count, int N, int C) {
  embedding_backward_of(dwte, dout, tokens, v_begin, v_count, N, C);
}
void embedding_backward(float* dwte, const Bf16* dout, const int32_t* tokens, int v_begin, int v_count, int N, int C) {
  embedding_backward_of(dwte, dout, tokens, v_begin, v_count, N, C);
}

void position_forward(float* out, const float* wpe, int B, int T, int t0, int C) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      float* o = out + (static_cast<std::size_t>(b) * T + t) * C;
      const float* p = wpe + static_cast<std::size_t>(t0 + t) * C;
      for (int c = 0; c < C; ++c) o[c] += p[c];
    }
}

void position_backward(float* dwpe, const float* dout, int B, int T, int t0, int C) {
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    float* d = dwpe + static_cast<std::size_t>(t0 + t) * C;
    for (int b = 0; b < B; ++b) {
      const float* g = dout + (static_cast<std::size_t>(b) * T + t) * C;
      for (int c = 0; c < C; ++c) d[c] += g[c];
    }
  }
}

void add_bias(float* out, const float* bias, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* o = out + static_cast<std::size_t>(n) * C;
    for (int c = 0; c < C; ++c) o[c] += bias[c];
  }
}

void vocab_max(float* row_max, const float* logits, int N, int V, int valid) {
  vocab_max_of(row_max, logits, N, V, valid);
}
void vocab_max(float* row_max, const Bf16* logits, int N, int V, int valid) {
  vocab_max_of(row_max, logits, N, V, valid);
}
void vocab_sumexp(float* stats, const float* logits, const float* row_max, const int32_t* targets, int v_begin, int N,
                  int V, int valid) {
  vocab_sumexp_of(stats, logits, row_max, targets, v_begin, N, V, valid);
}
void vocab_sumexp(float* stats, const Bf16* logits, const float* row_max, const int32_t* targets, int v_begin, int N,
                  int V, int valid) {
  vocab_sumexp_of(stats, logits, row_max, targets, v_begin, N, V, valid);
}
void vocab_crossentropy(float* losses, float* dlogits, const float* logits, const float* row_max, const float* stats,
                        const int32_t* targets, int v_begin, int N, int V, int valid, float dscale) {
  vocab_crossentropy_of(losses, dlogits, logits, row_max, stats, targets, v_begin, N, V, valid, dscale);
}
void vocab_crossentropy(float* losses, Bf16* dlogits, const Bf16* logits, const float* row_max, const float* stats,
                        const int32_t* targets, int v_begin, int N, int V, int valid, float dscale) {
  vocab_crossentropy_of(losses, dlogits, logits, row_max, stats, targets, v_begin, N, V, valid, dscale);
}

}  // namespace strata::cpu
