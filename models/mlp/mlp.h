// A small MLP regression used by examples/custom_trainer/custom_trainer.cpp and the sharding tests: the model declaration as
// Strata units, deterministic init and data, and per-layer forward / backward on host f32 arrays.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/memory/activation_offload.h"
#include "runtime/sharding/sharded_model.h"

namespace strata::mlp {

// in -> hidden (tanh) -> ... -> hidden (tanh) -> out (linear); `hidden_layers` >= 1 tanh layers.
struct MlpConfig {
  int in = 7;
  int hidden = 13;
  int out = 3;
  int hidden_layers = 2;
  // Rows are sequences of `seq` positions; above 1, a causal self-attention mixes them after layer 1 (MlpLayers,
  // mlp_attention.h). 1: rows are independent samples.
  int seq = 1;
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
// The rows `rows` of the same data set, in that order (a cp rank's positions of its sequences).
Batch make_rows(const MlpConfig& cfg, const std::vector<std::uint64_t>& rows, std::uint64_t seed);

// The parameters of one layer as f32 (converted from the gathered dtype when needed).
struct LayerParams {
  std::vector<float> weight, bias, input_scale;  // input_scale empty except for layer 0
};
LayerParams read_layer(const std::vector<TensorView>& views);

// Values a layer keeps from its forward to its backward (f32 or bf16), in the device's memory and its ledger
// (kActivations): what a step's memory prediction declares (the MLP computes on the CPU backend, where that memory is
// host memory).
class KeptValues {
 public:
  KeptValues(Device& device, const void* values, std::size_t bytes);
  template <typename T>
  KeptValues(Device& device, const std::vector<T>& values)
      : KeptValues(device, values.data(), values.size() * sizeof(T)) {}
  std::size_t bytes() const { return bytes_; }
  const void* data() const { return buffer_.data(); }

 private:
  Buffer buffer_;
  std::size_t bytes_ = 0;
};

// Where and how the layers keep their activations: `recompute` (RecomputePolicy's full kind for every layer) keeps
// the inputs alone, a layer's backward rebuilding its output from its input (layer_output); with `offload` the kept
// values wait in host memory between a layer's forward and its backward, block `first_block` + the layer's place
// among those kept (a pipeline stage's slot s: s x its layers), the device holding the offload's two staging sets.
// `dtype`: the activations' type, f32 or bf16 (MlpLayers: kept, and passed between the layers, as bf16).
struct KeepOptions {
  bool recompute = false;
  ActivationOffload* offload = nullptr;
  int first_block = 0;
  DType dtype = DType::kF32;
};

// Forward activations kept for backward, per layer in the order kept: its (scaled) input [rows, layer_in] and its
// output [rows, layer_out] (under tp, the widths this rank holds), in ledger memory on the device or offloaded.
class Activations {
 public:
  explicit Activations(Device& device, KeepOptions options = {}) : device_(&device), options_(options) {}
  Device& device() const { return *device_; }
  bool recompute() const { return options_.recompute; }
  DType dtype() const { return options_.dtype; }
  // The values of the type dtype() names (f32 or Bf16).
  template <typename T>
  void keep(const std::vector<T>& input, const std::vector<T>& output) {
    STRATA_CHECK(sizeof(T) == dtype_size(dtype()), "activations of {} kept as values of {} bytes", dtype_name(dtype()),
                 sizeof(T));
    keep_bytes(input.data(), input.size() * sizeof(T), output.data(), output.size() * sizeof(T));
  }
  // Layer u's kept values for its backward, valid until release(u): its input, and its output (null under
  // recomputation), of dtype(). Offloaded, they are brought back into a staging set first, and layer u - 1's are
  // prefetched.
  struct Kept {
    const void* input = nullptr;
    const void* output = nullptr;
  };
  Kept load(int u);
  void release(int u);
  void clear();
  // What the sequence-mixing attention keeps (MlpAttention, with MlpConfig::seq > 1), in the ledger.
  std::vector<KeptValues> attention;

 private:
  void keep_bytes(const void* input, std::size_t input_bytes, const void* output, std::size_t output_bytes);

  Device* device_;
  KeepOptions options_;
  std::vector<KeptValues> inputs_, outputs_;  // on the device, without offload
  int kept_ = 0;                              // layers kept since clear()
  std::vector<int> loaded_set_;               // offload: the staging set layer u's backward reads (-1: none)
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
std::vector<float> layer_backward(const MlpConfig& cfg, int layer, const LayerParams& p, Activations& acts,
                                  const std::vector<float>& dy, int rows, std::vector<float>& dweight,
                                  std::vector<float>& dbias);
// Adds f32 gradients into a gradient view of any float dtype.
void add_into(const TensorView& grad, const std::vector<float>& values);

}  // namespace strata::mlp

namespace strata::mlp {

// One micro-batch through a ShardedModel: forward unit by unit, loss, backward in reverse, gradients added into
// Strata's buffers (scaled by grad_scale, e.g. 1/micro_batches times the loss scale). Returns the local loss.
// `keep`: recomputation and activation offload (bitwise the same results); f32 activations only (bf16 ones go
// through MlpLayers, at any tp).
double forward_backward(ShardedModel& model, const MlpConfig& cfg, const Batch& batch, float grad_scale,
                        const KeepOptions& keep = {});

}  // namespace strata::mlp
