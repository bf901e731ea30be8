// A small MLP regression used by examples/custom_trainer/custom_trainer.cpp and the sharding tests: the model declaration as
// Strata units, deterministic init and data, and per-layer forward / backward on host f32 arrays.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/sharding/sharded_model.h"

namespace strata::mlp {

// in -> hidden (tanh) -> ... -> hidden (tanh) -> out (linear); `hidden_layers` >= 1 tanh layers.
struct MlpConfig {
  int in = 7;
  int hidden = 13;
  int out = 3;
  int hidden_layers = 2;
  int num_layers() const { return hidden_layers + 1; }
  int layer_in(int i) const { return i == 0 ? in : hidden; }
  int layer_out(int i) const { return i == num_layers() - 1 ? out : hidden; }
  // kInvalidArgument naming the quantity and its factors (--hidden, --layers, the rows) when the parameters or the
  // activations of `rows` rows overflow their integer types or could never be allocated (core/checked_math.h).
  void validate_sizes(int rows) const;
};

// One unit per layer: "layer{i}" with "layer{i}.weight" [in, out] (Conv1D layout, decayed) and "layer{i}.bias"
// [out] (not decayed). Layer 0 also holds a frozen "layer0.input_scale" [in] and a zero-size "layer0.unused" [0],
// so uneven, frozen and empty parameters are always exercised.
std::vector<UnitSpec> mlp_units(const MlpConfig& cfg);

// Deterministic init: weights uniform in +-1/sqrt(fan_in), biases small, input_scale around 1. Depends only on
// (slot name, element index, seed), so every rank can fill any part.
void mlp_init(const ParamSlot& slot, std::size_t begin, std::size_t count, float* out, std::uint64_t seed);

// Rows [first_row, first_row + rows) of the synthetic regression data set (inputs and targets).
struct Batch {
  int rows = 0;
  std::vector<float> x;  // [rows, in]
  std::vector<float> t;  // [rows, out]
};
Batch make_batch(const MlpConfig& cfg, std::uint64_t first_row, int rows, std::uint64_t seed);

// The parameters of one layer as f32 (converted from the gathered dtype when needed).
struct LayerParams {
  std::vector<float> weight, bias, input_scale;  // input_scale empty except for layer 0
};
LayerParams read_layer(const std::vector<TensorView>& views);

// Values a layer keeps from its forward to its backward, in the device's memory and its ledger (kActivations): what
// a step's memory prediction declares (the MLP computes on the CPU backend, where that memory is host memory).
class KeptFloats {
 public:
  KeptFloats(Device& device, const std::vector<float>& values);
  std::size_t size() const { return size_; }
  const float* data() const { return buffer_.as<float>(); }
  float operator[](std::size_t i) const { return data()[i]; }
  std::vector<float> values() const { return {data(), data() + size_}; }

 private:
  Buffer buffer_;
  std::size_t size_ = 0;
};

// Forward activations kept for backward, per layer: its (scaled) input [rows, layer_in] and its output
// [rows, layer_out] (under tp, the widths this rank holds). With `recompute` (RecomputePolicy's full kind for every
// layer) only the inputs are kept, and a layer's backward rebuilds its output from its input (layer_output).
struct Activations {
  explicit Activations(Device& d, bool recompute_outputs = false) : device(&d), recompute(recompute_outputs) {}
  Device* device;
  bool recompute;
  std::vector<KeptFloats> inputs, outputs;
  void keep(const std::vector<float>& input, const std::vector<float>& output);
  void clear();
};

// act(xs @ W + b) for a layer's scaled input xs [rows, layer_in] (tanh but for the last layer).
std::vector<float> layer_output(const MlpConfig& cfg, int layer, const LayerParams& p, const float* xs, int rows);
// y = act(x' @ W + b), x' = x * input_scale for layer 0: kept in `acts` (x' and y; x' alone under recomputation) and
// returned.
std::vector<float> layer_forward(const MlpConfig& cfg, int layer, const LayerParams& p, const std::vector<float>& x,
                                 int rows, Activations& acts);
// Mean squared error over rows x out, and its gradient with respect to the output (scaled by `grad_scale`).
double mse_loss(const std::vector<float>& y, const std::vector<float>& t, std::vector<float>& dy, float grad_scale);
// From dy (gradient of the layer output) computes dW, db (added into dweight / dbias) and returns dx (the gradient
// of the layer's scaled input).
std::vector<float> layer_backward(const MlpConfig& cfg, int layer, const LayerParams& p, const Activations& acts,
                                  const std::vector<float>& dy, int rows, std::vector<float>& dweight,
                                  std::vector<float>& dbias);
// Adds f32 gradients into a gradient view of any float dtype.
void add_into(const TensorView& grad, const std::vector<float>& values);

}  // namespace strata::mlp

namespace strata::mlp {

// One micro-batch through a ShardedModel: forward unit by unit, loss, backward in reverse, gradients added into
// Strata's buffers (scaled by grad_scale, e.g. 1/micro_batches times the loss scale). Returns the local loss.
// With `recompute`, each layer keeps only its input and rebuilds its output in the backward (bitwise the same).
double forward_backward(ShardedModel& model, const MlpConfig& cfg, const Batch& batch, float grad_scale,
                        bool recompute = false);

}  // namespace strata::mlp
