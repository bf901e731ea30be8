// The tensor-parallel MLP: its split, its init by global index, host kernels, and one micro-batch through
// ColumnParallelLinear / RowParallelLinear.
#include "models/mlp/mlp_tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>

namespace strata::mlp {

LayerSplit layer_split(const MlpConfig& cfg, int layer) {
  if (layer % 2 == 1) return LayerSplit::kRow;
  return layer == cfg.num_layers() - 1 ? LayerSplit::kReplicated : LayerSplit::kColumn;
}

namespace {
// Layer i's input and output widths on a tp rank.
std::pair<std::uint64_t, std::uint64_t> local_widths(const MlpConfig& cfg, int i, int tp) {
  const LayerSplit split = layer_split(cfg, i);
  return {static_cast<std::uint64_t>(cfg.layer_in(i)) / (split == LayerSplit::kRow ? tp : 1),
          static_cast<std::uint64_t>(cfg.layer_out(i)) / (split == LayerSplit::kColumn ? tp : 1)};
}
}  // namespace

std::uint64_t kept_activation_bytes(const MlpConfig& cfg, int first, int last, int rows, int tp, bool recompute,
                                    std::size_t element_bytes) {
  std::uint64_t floats = 0;
  for (int i = first; i < last; ++i) {
    const auto [in, out] = local_widths(cfg, i, tp);
    floats += static_cast<std::uint64_t>(rows) * (in + (recompute ? 0 : out));
  }
  return element_bytes * floats;
}

std::uint64_t rebuilt_activation_bytes(const MlpConfig& cfg, int first, int last, int rows, int tp,
                                       std::size_t element_bytes) {
  std::uint64_t floats = 0;
  for (int i = first; i < last; ++i) {
    if (i == cfg.num_layers() - 1) continue;  // the output layer's is not needed (no tanh)
    floats = std::max(floats, static_cast<std::uint64_t>(rows) * local_widths(cfg, i, tp).second);
  }
  return element_bytes * floats;
}

std::vector<std::size_t> offloaded_activation_bytes(const MlpConfig& cfg, int first, int last, int rows, int tp,
                                                    bool recompute, std::size_t element_bytes) {
  std::size_t in = 0, out = 0;
  for (int i = first; i < last; ++i) {
    const auto [local_in, local_out] = local_widths(cfg, i, tp);
    in = std::max(in, static_cast<std::size_t>(rows) * static_cast<std::size_t>(local_in));
    out = std::max(out, static_cast<std::size_t>(rows) * static_cast<std::size_t>(local_out));
  }
  if (recompute) return {element_bytes * in};
  return {element_bytes * in, element_bytes * out};
}

std::uint64_t largest_tp_all_reduce(const MlpConfig& cfg, int first, int last, int rows) {
  std::uint64_t widest = 0;
  for (int i = first; i < last; ++i) {
    const LayerSplit split = layer_split(cfg, i);
    if (split == LayerSplit::kColumn) widest = std::max<std::uint64_t>(widest, cfg.layer_in(i));
    if (split == LayerSplit::kRow) widest = std::max<std::uint64_t>(widest, cfg.layer_out(i));
  }
  return static_cast<std::uint64_t>(rows) * widest;
}

std::vector<UnitSpec> mlp_units_tp(const MlpConfig& cfg, int tp) {
  std::vector<UnitSpec> units = mlp_units(cfg);
  for (int i = 0; i < cfg.num_layers(); ++i) {
    const std::int64_t in = cfg.layer_in(i), out = cfg.layer_out(i);
    TpSplit w, b;  // replicated unless split below
    if (layer_split(cfg, i) == LayerSplit::kColumn) {
      w = TpSplit{1, 1, {in, out}};
      b = TpSplit{0, 1, {out}};
    } else if (layer_split(cfg, i) == LayerSplit::kRow) {
      w = TpSplit{0, 1, {in, out}};
    }
    for (SlotSpec& s : units[static_cast<std::size_t>(i)].slots) {
      const TpSplit& split = s.name.ends_with(".weight") ? w : s.name.ends_with(".bias") ? b : TpSplit{};
      if (split.replicated()) continue;
      split.validate(s.name, tp);
      s.tp = split;
      s.shape = split.local_shape(tp);
    }
  }
  return units;
}

SlotInit mlp_init_tp(const DeviceMesh& mesh, std::uint64_t seed) {
  return init_by_global_index(mesh, [seed](const ParamSlot& s, std::size_t global, std::size_t n, float* out) {
    if (s.tp.replicated()) return mlp_init(s, global, n, out, seed);
    ParamSlot whole = s;  // mlp_init takes its fan-in from the shape: the global one
    whole.shape = s.tp.global_shape;
    mlp_init(whole, global, n, out, seed);
  });
}

void HostLinearKernels::matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                                       int IC, int OC) {
  for (int r = 0; r < N; ++r)
    for (int o = 0; o < OC; ++o) {
      float acc = bias ? bias[o] : 0.0f;
      for (int j = 0; j < IC; ++j)
        acc += inp[static_cast<std::size_t>(r) * IC + j] * weight[static_cast<std::size_t>(j) * OC + o];
      out[static_cast<std::size_t>(r) * OC + o] = acc;
    }
}

void HostLinearKernels::matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                        const float* inp, const float* weight, int N, int IC, int OC) {
  for (int r = 0; r < N; ++r)
    for (int o = 0; o < OC; ++o) {
      const float g = dout[static_cast<std::size_t>(r) * OC + o];
      if (dbias) dbias[o] += g;
      for (int j = 0; j < IC; ++j) {
        dweight[static_cast<std::size_t>(j) * OC + o] += inp[static_cast<std::size_t>(r) * IC + j] * g;
        if (dinp) dinp[static_cast<std::size_t>(r) * IC + j] += g * weight[static_cast<std::size_t>(j) * OC + o];
      }
    }
}

void HostLinearKernels::add_bias(float* out, const float* bias, int N, int C) {
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < C; ++c) out[static_cast<std::size_t>(r) * C + c] += bias[c];
}

void HostLinearKernels::zero(void* p, std::size_t bytes) { std::memset(p, 0, bytes); }

void HostLinearKernels::matmul_forward_bf16(Bf16* out, const Bf16* inp, const float* weight, const float* bias, int N,
                                            int IC, int OC) {
  host_matmul_forward_bf16(*this, scratch_, out, inp, weight, bias, N, IC, OC);
}

void HostLinearKernels::matmul_backward_bf16(Bf16* dinp, float* dweight, float* dbias, const Bf16* dout,
                                             const Bf16* inp, const float* weight, int N, int IC, int OC) {
  host_matmul_backward_bf16(*this, scratch_, dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}

void HostLinearKernels::add_bias_bf16(Bf16* out, const float* bias, int N, int C) {
  host_add_bias_bf16(out, bias, N, C);
}

namespace {

// The activations' values as T (f32, or rounded once to bf16) and back to f32 (exactly).
template <typename T>
std::vector<T> as(const std::vector<float>& x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    std::vector<T> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = Bf16::from(x[i]);
    return out;
  }
}

template <typename T>
std::vector<float> widened(std::vector<T> x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    std::vector<float> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i].value();
    return out;
  }
}

void apply_tanh(std::vector<float>& y) {
  for (float& v : y) v = std::tanh(v);
}
void apply_tanh(std::vector<Bf16>& y) {
  for (Bf16& v : y) v = Bf16::from(std::tanh(v.value()));
}

// d *= tanh'(the output y) = 1 - y^2 (bf16: in f32, rounded once).
void tanh_grad(float& d, float y) { d *= 1.0f - y * y; }
void tanh_grad(Bf16& d, Bf16 y) {
  const float v = y.value();
  d = Bf16::from(d.value() * (1.0f - v * v));
}

}  // namespace

MlpLayers::Layer::Layer(const MlpConfig& cfg, int i, TensorParallel& tp, LinearKernels& k)
    : split(layer_split(cfg, i)), in(cfg.layer_in(i)), out(cfg.layer_out(i)), local_in(in), local_out(out) {
  if (split == LayerSplit::kColumn) local_out = col.emplace(tp, k, in, out).local_out();
  if (split == LayerSplit::kRow) local_in = row.emplace(tp, k, in, out).local_in();
}

MlpLayers::MlpLayers(const MlpConfig& cfg, TensorParallel& tp, int first, int last, Communicator* cp, DType activations)
    : last_layer_(last == cfg.num_layers()), first_(first), rows_(tp.rows()) {
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, tp.device().kind() == DeviceKind::kCpu,
                    "the MLP example computes on the host: run it on the CPU backend (device {})", tp.device().name());
  STRATA_CHECK(0 <= first && first < last && last <= cfg.num_layers(), "layers [{}, {}) of an MLP of {}", first, last,
               cfg.num_layers());
  for (int i = first; i < last; ++i) layers_.emplace_back(cfg, i, tp, k_);
  if (cfg.seq > 1 && first <= kAttentionAfter && kAttentionAfter < last) {
    STRATA_CHECK(cp != nullptr, "--seq {}: the attention after layer {} needs the cp group", cfg.seq, kAttentionAfter);
    STRATA_CHECK(cfg.num_layers() > kAttentionAfter + 1 && layer_split(cfg, kAttentionAfter) != LayerSplit::kColumn,
                 "--seq {}: the attention follows layer {}, whose output must be whole on every tp rank and not the "
                 "model's output: use --layers 2 or more",
                 cfg.seq, kAttentionAfter);
    const ContextChunks chunks = ContextChunks::of(cfg.seq, cp->size(), cp->rank());
    STRATA_CHECK(tp.rows() % chunks.local_rows() == 0,
                 "--seq {} over cp {}: this rank's {} rows are not whole sequences of {} local rows", cfg.seq,
                 cp->size(), tp.rows(), chunks.local_rows());
    attention_ = std::make_unique<MlpAttention>(*cp, chunks, tp.rows() / chunks.local_rows(), cfg.hidden, activations);
  }
}

template <typename T>
std::vector<T> MlpLayers::output(std::size_t u, const LayerParams& p, const T* x) {
  Layer& L = layers_[u];
  const int rows = rows_;
  std::vector<T> y(static_cast<std::size_t>(rows) * L.local_out);
  if (L.col)
    L.col->forward(y.data(), x, nullptr, p.weight.data(), p.bias.data());
  else if (L.row)
    L.row->forward(y.data(), nullptr, x, p.weight.data(), p.bias.data());
  else
    linear_forward(k_, y.data(), x, p.weight.data(), p.bias.data(), rows, L.in, L.out);
  if (!(last_layer_ && u + 1 == layers_.size())) apply_tanh(y);
  return y;
}

std::vector<float> MlpLayers::forward(ShardedModel& model, std::vector<float> x, Activations& acts) {
  const std::size_t expected = static_cast<std::size_t>(rows_) * static_cast<std::size_t>(layers_.front().in);
  STRATA_CHECK(x.size() == expected, "the tp group was made for {} rows of {}: {} values, the micro-batch has {}",
               rows_, layers_.front().in, expected, x.size());
  if (acts.dtype() == DType::kBF16) return forward_as<Bf16>(model, std::move(x), acts);
  STRATA_CHECK(acts.dtype() == DType::kF32, "the MLP's activations are f32 or bf16, not {}", dtype_name(acts.dtype()));
  return forward_as<float>(model, std::move(x), acts);
}

std::vector<float> MlpLayers::backward(ShardedModel& model, std::vector<float> dy, Activations& acts) {
  const std::size_t expected = static_cast<std::size_t>(rows_) * static_cast<std::size_t>(layers_.back().local_out);
  STRATA_CHECK(dy.size() == expected, "the tp group was made for {} rows of {}: {} values, the gradient has {}", rows_,
               layers_.back().local_out, expected, dy.size());
  if (acts.dtype() == DType::kBF16) return backward_as<Bf16>(model, std::move(dy), acts);
  return backward_as<float>(model, std::move(dy), acts);
}

template <typename T>
std::vector<float> MlpLayers::forward_as(ShardedModel& model, std::vector<float> input, Activations& acts) {
  const int rows = rows_;
  acts.clear();
  std::vector<T> x;
  for (std::size_t u = 0; u < layers_.size(); ++u) {
    Layer& L = layers_[u];
    const int unit = static_cast<int>(u);
    LayerParams p = read_layer(model.begin_forward(unit));
    if (u == 0) {  // the range's input: scaled in f32 (layer 0), then of the activations' type
      if (!p.input_scale.empty())
        for (int r = 0; r < rows; ++r)
          for (int j = 0; j < L.in; ++j)
            input[static_cast<std::size_t>(r) * L.in + j] *= p.input_scale[static_cast<std::size_t>(j)];
      x = as<T>(input);
    }
    std::vector<T> y = output(u, p, x.data());
    model.end_forward(unit);
    acts.keep(x, y);
    if (attention_ && first_ + unit == kAttentionAfter) y = attention_->forward(y, acts.attention);
    x = std::move(y);
  }
  return widened(std::move(x));
}

template <typename T>
std::vector<float> MlpLayers::backward_as(ShardedModel& model, std::vector<float> dy_in, Activations& acts) {
  const int rows = rows_;
  std::vector<T> dy = as<T>(dy_in);
  for (int u = static_cast<int>(layers_.size()) - 1; u >= 0; --u) {
    Layer& L = layers_[static_cast<std::size_t>(u)];
    if (attention_ && first_ + u == kAttentionAfter) dy = attention_->backward(dy, acts.attention);
    BackwardViews v = model.begin_backward(u);
    LayerParams p = read_layer(v.params);
    const Activations::Kept kept = acts.load(u);
    const auto* xin = static_cast<const T*>(kept.input);
    if (!(last_layer_ && u + 1 == static_cast<int>(layers_.size()))) {
      // Recomputation: the output rebuilt from the kept input (its collective again), for this backward only.
      std::optional<KeptValues> rebuilt;
      if (acts.recompute()) rebuilt.emplace(acts.device(), output(static_cast<std::size_t>(u), p, xin));
      const auto* out = static_cast<const T*>(rebuilt ? rebuilt->data() : kept.output);
      for (std::size_t e = 0; e < dy.size(); ++e) tanh_grad(dy[e], out[e]);
    }
    std::vector<float> dw(p.weight.size(), 0.0f), db(p.bias.size(), 0.0f);
    std::vector<T> dx(static_cast<std::size_t>(rows) * L.local_in, T{});
    if (L.col) L.col->backward(dx.data(), nullptr, dw.data(), db.data(), dy.data(), xin, p.weight.data());
    else if (L.row) L.row->backward(dx.data(), nullptr, dw.data(), db.data(), dy.data(), xin, p.weight.data());
    else
      linear_backward(k_, dx.data(), dw.data(), db.data(), dy.data(), xin, p.weight.data(), rows, L.in, L.out);
    acts.release(u);
    for (const TensorView& g : v.grads) {
      if (g.slot->name.ends_with(".weight")) add_into(g, dw);
      else if (g.slot->name.ends_with(".bias")) add_into(g, db);
    }
    model.end_backward(u);
    dy = std::move(dx);
  }
  return widened(std::move(dy));
}

}  // namespace strata::mlp
