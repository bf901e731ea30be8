// The MLP regression: declaration, deterministic init and data, per-layer forward and backward.
#include "models/mlp/mlp.h"

#include <cmath>
#include <cstring>
#include <optional>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/hash.h"
#include "runtime/sharding/flat_ops.h"

namespace strata::mlp {
namespace {

// Uniform in [-1, 1), a pure function of its arguments.
float uniform(std::uint64_t a, std::uint64_t b, std::uint64_t seed) {
  std::uint64_t r = splitmix64(a ^ splitmix64(b ^ splitmix64(seed)));
  return static_cast<float>(static_cast<double>(r >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

}  // namespace

std::vector<UnitSpec> mlp_units(const MlpConfig& cfg) {
  std::vector<UnitSpec> units;
  for (int i = 0; i < cfg.num_layers(); ++i) {
    UnitSpec u;
    u.name = "layer" + std::to_string(i);
    u.slots.push_back({u.name + ".weight", {cfg.layer_in(i), cfg.layer_out(i)}, true, true});
    u.slots.push_back({u.name + ".bias", {cfg.layer_out(i)}, false, true});
    if (i == 0) {
      u.slots.push_back({u.name + ".input_scale", {cfg.in}, false, false});
      u.slots.push_back({u.name + ".unused", {0}, true, true});
    }
    units.push_back(std::move(u));
  }
  return units;
}

void mlp_init(const ParamSlot& slot, std::size_t begin, std::size_t count, float* out, std::uint64_t seed) {
  std::uint64_t h = fnv1a(slot.name);
  bool is_weight = slot.name.find(".weight") != std::string::npos;
  bool is_scale = slot.name.find(".input_scale") != std::string::npos;
  float fan_in = slot.shape.empty() ? 1.0f : static_cast<float>(slot.shape[0]);
  for (std::size_t k = 0; k < count; ++k) {
    float u = uniform(h, begin + k, seed);
    if (is_weight) out[k] = u / std::sqrt(fan_in);
    else if (is_scale) out[k] = 1.0f + 0.25f * u;
    else out[k] = 0.05f * u;
  }
}

void MlpConfig::validate_sizes(int rows) const {
  STRATA_CHECK(in >= 1 && hidden >= 1 && out >= 1 && hidden_layers >= 1 && rows >= 0,
               "MLP in {}, hidden {}, out {}, hidden layers {} must be at least 1 (rows {} at least 0)", in, hidden,
               out, hidden_layers, rows);
  const std::uint64_t h = static_cast<std::uint64_t>(hidden);
  const std::uint64_t weights = checked_add<std::uint64_t>(
      checked_product("the hidden weights (--layers x --hidden x --hidden)", hidden_layers, h, h),
      checked_product("the outer weights ((in + out) x --hidden)", in + out, h), "the MLP's parameters");
  // f32 weights, gradients and two AdamW moments, plus the f32 copies the layers work on.
  check_addressable(checked_product("the MLP's f32 state (24 bytes x parameters)", 24, weights),
                    fmt::format("{} MLP parameters (--hidden {}, --layers {})", weights, hidden, hidden_layers).c_str());
  // Per layer: its input, output and their gradients, [rows, hidden] f32 each.
  check_addressable(checked_product("the activations (4 bytes x 4 x (--layers + 1) x rows x --hidden)", 16,
                                    hidden_layers + 1, rows, h),
                    fmt::format("the MLP's activations of {} rows at --hidden {}", rows, hidden).c_str());
}

Batch make_rows(const MlpConfig& cfg, const std::vector<std::uint64_t>& rows, std::uint64_t seed) {
  Batch b;
  b.rows = static_cast<int>(rows.size());
  b.x.resize(rows.size() * static_cast<std::size_t>(cfg.in));
  b.t.resize(rows.size() * static_cast<std::size_t>(cfg.out));
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::uint64_t row = rows[r];
    float* x = &b.x[r * static_cast<std::size_t>(cfg.in)];
    for (int j = 0; j < cfg.in; ++j) x[j] = uniform(row, static_cast<std::uint64_t>(j), seed ^ 0xda7aull);
    for (int o = 0; o < cfg.out; ++o) {
      // A smooth teacher function of the inputs, plus nothing random: the loss can fall towards zero.
      float acc = 0;
      for (int j = 0; j < cfg.in; ++j) acc += std::sin(static_cast<float>((o + 1) * (j + 1)) * 0.37f) * x[j];
      b.t[r * static_cast<std::size_t>(cfg.out) + o] = std::tanh(acc) + 0.1f * static_cast<float>(o);
    }
  }
  return b;
}

Batch make_batch(const MlpConfig& cfg, std::uint64_t first_row, int rows, std::uint64_t seed) {
  std::vector<std::uint64_t> ids(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r) ids[static_cast<std::size_t>(r)] = first_row + static_cast<std::uint64_t>(r);
  return make_rows(cfg, ids, seed);
}

LayerParams read_layer(const std::vector<TensorView>& views) {
  LayerParams p;
  auto read = [](const TensorView& v) {
    std::vector<float> out(v.numel());
    convert(v.data, v.dtype, out.data(), DType::kF32, v.numel());
    return out;
  };
  for (const TensorView& v : views) {
    const std::string& n = v.slot->name;
    if (n.ends_with(".weight")) p.weight = read(v);
    else if (n.ends_with(".bias")) p.bias = read(v);
    else if (n.ends_with(".input_scale")) p.input_scale = read(v);
  }
  return p;
}

KeptValues::KeptValues(Device& device, const void* values, std::size_t bytes)
    : buffer_(device.allocate(bytes, MemCategory::kActivations)), bytes_(bytes) {
  if (bytes > 0) std::memcpy(buffer_.data(), values, bytes);
}

namespace {

// `bytes` of values into activation `act` of an offload staging set (host memory: the MLP computes on the CPU
// backend, whose compute stream runs inline, so the set is free once begin_forward returns).
void stage(ActivationOffload& o, int set, int act, const void* values, std::size_t bytes) {
  STRATA_CHECK(bytes <= o.bytes(act), "a kept activation of {} bytes does not fit the offload's {}", bytes,
               o.bytes(act));
  if (bytes > 0) std::memcpy(o.staging(set, act), values, bytes);
}

}  // namespace

void Activations::keep_bytes(const void* input, std::size_t input_bytes, const void* output, std::size_t output_bytes) {
  const int u = kept_++;
  if (!options_.offload) {
    inputs_.emplace_back(*device_, input, input_bytes);
    if (!recompute()) outputs_.emplace_back(*device_, output, output_bytes);
    return;
  }
  ActivationOffload& o = *options_.offload;
  const int set = o.begin_forward();
  stage(o, set, 0, input, input_bytes);
  if (!recompute()) stage(o, set, 1, output, output_bytes);
  o.end_forward(set, options_.first_block + u);
}

Activations::Kept Activations::load(int u) {
  STRATA_CHECK(u >= 0 && u < kept_, "layer {} of the {} whose activations were kept", u, kept_);
  const auto i = static_cast<std::size_t>(u);
  if (!options_.offload) return {inputs_[i].data(), recompute() ? nullptr : outputs_[i].data()};
  ActivationOffload& o = *options_.offload;
  loaded_set_.resize(static_cast<std::size_t>(kept_), -1);
  const int set = o.begin_backward(options_.first_block + u);
  loaded_set_[i] = set;
  if (u > 0) o.prefetch(options_.first_block + u - 1);  // the next backward's, while this one computes
  return {o.staging(set, 0), recompute() ? nullptr : o.staging(set, 1)};
}

void Activations::release(int u) {
  if (!options_.offload) return;
  int& set = loaded_set_.at(static_cast<std::size_t>(u));
  if (set >= 0) options_.offload->end_backward(set);
  set = -1;
}

void Activations::clear() {
  attention.clear();
  inputs_.clear();
  outputs_.clear();
  loaded_set_.clear();
  kept_ = 0;
}

std::vector<float> layer_output(const MlpConfig& cfg, int layer, const LayerParams& p, const float* xs, int rows) {
  const int in = cfg.layer_in(layer), out = cfg.layer_out(layer);
  const bool tanh_act = layer != cfg.num_layers() - 1;
  std::vector<float> y(static_cast<std::size_t>(rows) * out);
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < out; ++o) {
      float acc = p.bias[static_cast<std::size_t>(o)];
      for (int j = 0; j < in; ++j)
        acc += xs[static_cast<std::size_t>(r) * in + j] * p.weight[static_cast<std::size_t>(j) * out + o];
      y[static_cast<std::size_t>(r) * out + o] = tanh_act ? std::tanh(acc) : acc;
    }
  }
  return y;
}

std::vector<float> layer_forward(const MlpConfig& cfg, int layer, const LayerParams& p, const std::vector<float>& x,
                                 int rows, Activations& acts) {
  const int in = cfg.layer_in(layer);
  std::vector<float> xs = x;
  if (!p.input_scale.empty())
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < in; ++j)
        xs[static_cast<std::size_t>(r) * in + j] *= p.input_scale[static_cast<std::size_t>(j)];
  std::vector<float> y = layer_output(cfg, layer, p, xs.data(), rows);
  acts.keep(xs, y);
  return y;
}

double mse_loss(const std::vector<float>& y, const std::vector<float>& t, std::vector<float>& dy, float grad_scale) {
  STRATA_CHECK(y.size() == t.size(), "prediction size {} != target size {}", y.size(), t.size());
  dy.resize(y.size());
  double loss = 0;
  const float n = static_cast<float>(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) {
    float d = y[i] - t[i];
    loss += static_cast<double>(d) * d;
    dy[i] = grad_scale * 2.0f * d / n;
  }
  return loss / static_cast<double>(y.size());
}

std::vector<float> layer_backward(const MlpConfig& cfg, int layer, const LayerParams& p, Activations& acts,
                                  const std::vector<float>& dy, int rows, std::vector<float>& dweight,
                                  std::vector<float>& dbias) {
  const int in = cfg.layer_in(layer), out = cfg.layer_out(layer);
  const bool tanh_act = layer != cfg.num_layers() - 1;
  const Activations::Kept kept = acts.load(layer);
  const auto* xs = static_cast<const float*>(kept.input);
  std::vector<float> dz(dy);
  if (tanh_act) {
    // Recomputation: the output rebuilt from the input, in ledger memory for this layer's backward only.
    std::optional<KeptValues> rebuilt;
    if (acts.recompute()) rebuilt.emplace(acts.device(), layer_output(cfg, layer, p, xs, rows));
    const auto* y = static_cast<const float*>(rebuilt ? rebuilt->data() : kept.output);
    for (std::size_t i = 0; i < dz.size(); ++i) dz[i] *= 1.0f - y[i] * y[i];
  }
  dweight.assign(static_cast<std::size_t>(in) * out, 0.0f);
  dbias.assign(static_cast<std::size_t>(out), 0.0f);
  std::vector<float> dx(static_cast<std::size_t>(rows) * in, 0.0f);
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < out; ++o) {
      float g = dz[static_cast<std::size_t>(r) * out + o];
      dbias[static_cast<std::size_t>(o)] += g;
      for (int j = 0; j < in; ++j) {
        dweight[static_cast<std::size_t>(j) * out + o] += xs[static_cast<std::size_t>(r) * in + j] * g;
        dx[static_cast<std::size_t>(r) * in + j] += g * p.weight[static_cast<std::size_t>(j) * out + o];
      }
    }
  }
  acts.release(layer);
  return dx;
}

void add_into(const TensorView& grad, const std::vector<float>& values) {
  STRATA_CHECK(values.size() == grad.numel(), "gradient of '{}' has {} values, expected {}", grad.slot->name,
               values.size(), grad.numel());
  add_f32_into(grad.data, grad.dtype, values.data(), values.size());
}

}  // namespace strata::mlp

namespace strata::mlp {

double forward_backward(ShardedModel& model, const MlpConfig& cfg, const Batch& batch, float grad_scale,
                        const KeepOptions& keep) {
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, model.resources().device().kind() == DeviceKind::kCpu,
                    "the MLP example computes on the host: run it on the CPU backend (device {})",
                    model.resources().device().name());
  const int layers = cfg.num_layers();
  STRATA_CHECK_CODE(ErrorCode::kUnsupported, keep.dtype == DType::kF32,
                    "the MLP's one-rank path keeps f32 activations; bf16 ones go through MlpLayers "
                    "(mlp_tensor_parallel.h, at any tp)");
  Activations acts(model.resources().device(), keep);
  std::vector<float> x = batch.x;
  for (int i = 0; i < layers; ++i) {
    LayerParams p = read_layer(model.begin_forward(i));  // gathers unit i (ZeRO-3), waits for it
    x = layer_forward(cfg, i, p, x, batch.rows, acts);   // kept, or (recomputation) its input alone
    model.end_forward(i);                                // frees it again (reshard_after_forward)
  }
  std::vector<float> dy;
  double loss = mse_loss(x, batch.t, dy, grad_scale);
  for (int i = layers - 1; i >= 0; --i) {
    BackwardViews v = model.begin_backward(i);  // gathers again if needed; gradient buffers zeroed
    LayerParams p = read_layer(v.params);
    std::vector<float> dw, db;
    dy = layer_backward(cfg, i, p, acts, dy, batch.rows, dw, db);
    for (const TensorView& g : v.grads) {
      if (g.slot->name.ends_with(".weight")) add_into(g, dw);
      else if (g.slot->name.ends_with(".bias")) add_into(g, db);
    }
    model.end_backward(i);  // reduce-scatter into the f32 gradient shard
  }
  return loss;
}

}  // namespace strata::mlp
