// The tensor-parallel MLP: its split, its init by global index, host kernels, and one micro-batch through
// ColumnParallelLinear / RowParallelLinear.
#include "models/mlp/mlp_tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
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

std::uint64_t kept_activation_bytes(const MlpConfig& cfg, int first, int last, int rows, int tp, bool recompute) {
  std::uint64_t floats = 0;
  for (int i = first; i < last; ++i) {
    const auto [in, out] = local_widths(cfg, i, tp);
    floats += static_cast<std::uint64_t>(rows) * (in + (recompute ? 0 : out));
  }
  return 4 * floats;
}

std::uint64_t rebuilt_activation_bytes(const MlpConfig& cfg, int first, int last, int rows, int tp) {
  std::uint64_t floats = 0;
  for (int i = first; i < last; ++i) {
    if (i == cfg.num_layers() - 1) continue;  // the output layer's is not needed (no tanh)
    floats = std::max(floats, static_cast<std::uint64_t>(rows) * local_widths(cfg, i, tp).second);
  }
  return 4 * floats;
}

std::vector<std::size_t> offloaded_activation_bytes(const MlpConfig& cfg, int first, int last, int rows, int tp,
                                                    bool recompute) {
  std::size_t in = 0, out = 0;
  for (int i = first; i < last; ++i) {
    const auto [local_in, local_out] = local_widths(cfg, i, tp);
    in = std::max(in, static_cast<std::size_t>(rows) * static_cast<std::size_t>(local_in));
    out = std::max(out, static_cast<std::size_t>(rows) * static_cast<std::size_t>(local_out));
  }
  if (recompute) return {4 * in};
  return {4 * in, 4 * out};
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

void apply_tanh(std::vector<float>& y) {
  for (float& v : y) v = std::tanh(v);
}

MlpLayers::Layer::Layer(const MlpConfig& cfg, int i, TensorParallel& tp, LinearKernels& k)
    : split(layer_split(cfg, i)), in(cfg.layer_in(i)), out(cfg.layer_out(i)), local_in(in), local_out(out) {
  if (split == LayerSplit::kColumn) local_out = col.emplace(tp, k, in, out).local_out();
  if (split == LayerSplit::kRow) local_in = row.emplace(tp, k, in, out).local_in();
}

MlpLayers::MlpLayers(const MlpConfig& cfg, TensorParallel& tp, int first, int last)
    : last_layer_(last == cfg.num_layers()) {
  STRATA_CHECK(0 <= first && first < last && last <= cfg.num_layers(), "layers [{}, {}) of an MLP of {}", first, last,
               cfg.num_layers());
  for (int i = first; i < last; ++i) layers_.emplace_back(cfg, i, tp, k_);
}

std::vector<float> MlpLayers::output(std::size_t u, const LayerParams& p, const float* x, int rows) {
  Layer& L = layers_[u];
  std::vector<float> y(static_cast<std::size_t>(rows) * L.local_out);
  if (L.col)
    L.col->forward(y.data(), x, nullptr, p.weight.data(), p.bias.data());
  else if (L.row)
    L.row->forward(y.data(), nullptr, x, p.weight.data(), p.bias.data());
  else
    k_.matmul_forward(y.data(), x, p.weight.data(), p.bias.data(), rows, L.in, L.out);
  if (!(last_layer_ && u + 1 == layers_.size())) apply_tanh(y);
  return y;
}

std::vector<float> MlpLayers::forward(ShardedModel& model, std::vector<float> x, int rows, Activations& acts) {
  acts.clear();
  for (std::size_t u = 0; u < layers_.size(); ++u) {
    Layer& L = layers_[u];
    const int unit = static_cast<int>(u);
    LayerParams p = read_layer(model.begin_forward(unit));
    if (!p.input_scale.empty())
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < L.in; ++j) x[static_cast<std::size_t>(r) * L.in + j] *= p.input_scale[static_cast<std::size_t>(j)];
    std::vector<float> y = output(u, p, x.data(), rows);
    model.end_forward(unit);
    acts.keep(x, y);
    x = std::move(y);
  }
  return x;
}

std::vector<float> MlpLayers::backward(ShardedModel& model, std::vector<float> dy, int rows, Activations& acts) {
  for (int u = static_cast<int>(layers_.size()) - 1; u >= 0; --u) {
    Layer& L = layers_[static_cast<std::size_t>(u)];
    BackwardViews v = model.begin_backward(u);
    LayerParams p = read_layer(v.params);
    const Activations::Kept kept = acts.load(u);
    const float* xin = kept.input;
    if (!(last_layer_ && u + 1 == static_cast<int>(layers_.size()))) {
      // Recomputation: the output rebuilt from the kept input (its collective again), for this backward only.
      std::optional<KeptFloats> rebuilt;
      if (acts.recompute()) rebuilt.emplace(acts.device(), output(static_cast<std::size_t>(u), p, xin, rows));
      const float* out = rebuilt ? rebuilt->data() : kept.output;
      for (std::size_t e = 0; e < dy.size(); ++e) dy[e] *= 1.0f - out[e] * out[e];
    }
    std::vector<float> dw(p.weight.size(), 0.0f), db(p.bias.size(), 0.0f);
    std::vector<float> dx(static_cast<std::size_t>(rows) * L.local_in, 0.0f);
    if (L.col) L.col->backward(dx.data(), nullptr, dw.data(), db.data(), dy.data(), xin, p.weight.data());
    else if (L.row) L.row->backward(dx.data(), nullptr, dw.data(), db.data(), dy.data(), xin, p.weight.data());
    else k_.matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), xin, p.weight.data(), rows, L.in, L.out);
    acts.release(u);
    for (const TensorView& g : v.grads) {
      if (g.slot->name.ends_with(".weight")) add_into(g, dw);
      else if (g.slot->name.ends_with(".bias")) add_into(g, db);
    }
    model.end_backward(u);
    dy = std::move(dx);
  }
  return dy;
}

double forward_backward_tp(ShardedModel& model, TensorParallel& tp, const MlpConfig& cfg, const Batch& batch,
                           float grad_scale, const KeepOptions& keep) {
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, model.resources().device().kind() == DeviceKind::kCpu,
                    "the MLP example computes on the host: run it on the CPU backend (device {})",
                    model.resources().device().name());
  STRATA_CHECK(tp.rows() == batch.rows, "the tp group was made for {} rows; the batch has {}", tp.rows(), batch.rows);
  MlpLayers layers(cfg, tp, 0, cfg.num_layers());
  Activations acts(model.resources().device(), keep);
  std::vector<float> dy;
  const double loss = mse_loss(layers.forward(model, batch.x, batch.rows, acts), batch.t, dy, grad_scale);
  layers.backward(model, std::move(dy), batch.rows, acts);
  return loss;
}

}  // namespace strata::mlp
