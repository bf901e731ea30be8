// The MLP of mlp.h split over a tensor-parallel group with Strata's library layers (runtime/tensor): layers alternate
// column- and row-parallel from the first (Megatron's MLP pairing: one all-reduce forward per pair, one backward),
// and a last layer that would be column-parallel is replicated instead, so the prediction is whole on every tp rank.
// Host f32 kernels (HostLinearKernels) on the CPU backend. Written only against the installed API.
#pragma once

#include <strata/strata.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "models/mlp/mlp.h"
#include "models/mlp/mlp_attention.h"

namespace strata::mlp {

enum class LayerSplit { kColumn, kRow, kReplicated };
LayerSplit layer_split(const MlpConfig& cfg, int layer);

// mlp_units(cfg) with each layer's weight and bias split as layer_split says (local shapes at degree tp).
std::vector<UnitSpec> mlp_units_tp(const MlpConfig& cfg, int tp);
// mlp_init by global index: the same values at every tp degree (fan-in from the global shape).
SlotInit mlp_init_tp(const DeviceMesh& mesh, std::uint64_t seed);

// LinearKernels on host arrays, plain loops (f32 activations, or bf16 ones widened to f32).
class HostLinearKernels : public LinearKernels {
 public:
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                      int OC) override;
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int IC, int OC) override;
  void add_bias(float* out, const float* bias, int N, int C) override;
  void zero(void* p, std::size_t bytes) override;
  // bf16 activations through the loops above (host_matmul_*_bf16: widened, summed in f32, rounded once).
  void matmul_forward_bf16(Bf16* out, const Bf16* inp, const float* weight, const float* bias, int N, int IC,
                           int OC) override;
  void matmul_backward_bf16(Bf16* dinp, float* dweight, float* dbias, const Bf16* dout, const Bf16* inp,
                            const float* weight, int N, int IC, int OC) override;
  void add_bias_bf16(Bf16* out, const float* bias, int N, int C) override;

 private:
  std::vector<float> scratch_;
};

// Layers [first, last) of the MLP over a tp group (unit u of the model holds layer first + u): a whole model, or one
// pipeline stage's part. Activations are kept per layer in `acts` (mlp.h's: inputs and outputs, or inputs alone
// under its recomputation, the outputs rebuilt in the backward), of acts.dtype(): f32, or bf16 (each layer's input
// rounded once, the products through the library's bf16 overloads, tanh in f32 and rounded; the input, the output,
// and the gradients at the ends stay f32 vectors).
class MlpLayers {
 public:
  // Host kernels: the CPU backend (kUnsupported elsewhere). With cfg.seq > 1 and layer 1 in the range, its output goes
  // through MlpAttention over `cp` (required then; this rank's tp.rows() rows are sequences of the chunks' local
  // rows; `activations`: the Activations' dtype its forward and backward will be given, for the attention's ring). A
  // micro-batch through it: forward, the loss's gradient, backward, with one Activations.
  MlpLayers(const MlpConfig& cfg, TensorParallel& tp, int first, int last, Communicator* cp = nullptr,
            DType activations = DType::kF32);
  // The global layer the attention follows.
  static constexpr int kAttentionAfter = 1;
  const MlpAttention* attention() const { return attention_.get(); }
  // From the input of layer `first` ([tp.rows(), its width]) to the output of the last layer (this rank's columns when
  // it is column-parallel).
  std::vector<float> forward(ShardedModel& model, std::vector<float> x, Activations& acts);
  // From the gradient of the output to the gradient of the input of layer `first`; adds into the gradient views.
  std::vector<float> backward(ShardedModel& model, std::vector<float> dy, Activations& acts);

 private:
  template <typename T>
  std::vector<float> forward_as(ShardedModel& model, std::vector<float> x, Activations& acts);
  template <typename T>
  std::vector<float> backward_as(ShardedModel& model, std::vector<float> dy, Activations& acts);
  // Layer u's output from its (scaled) input x: the product (and its collective), then tanh but for the last layer.
  template <typename T>
  std::vector<T> output(std::size_t u, const LayerParams& p, const T* x);
  struct Layer {
    LayerSplit split;
    int in, out, local_in, local_out;
    std::optional<ColumnParallelLinear> col;
    std::optional<RowParallelLinear> row;
    Layer(const MlpConfig& cfg, int i, TensorParallel& tp, LinearKernels& k);
  };
  HostLinearKernels k_;
  bool last_layer_;  // the range ends with the model's output layer (no tanh)
  int first_;
  int rows_;  // the tp group's rows: what every forward and backward carries
  std::vector<Layer> layers_;
  std::unique_ptr<MlpAttention> attention_;
};

// Bytes the layers [first, last) keep per micro-batch (Activations: each layer's input and output at the widths this
// tp rank holds: a column-parallel layer's whole input and its out / tp columns, a row-parallel one's in / tp input
// and whole output; the inputs alone under recomputation), as mlp::forward_backward, MlpLayers and MlpPipelineStage
// keep them; `element_bytes` 2 for bf16 activations.
std::uint64_t kept_activation_bytes(const MlpConfig& cfg, int first, int last, int rows, int tp, bool recompute = false,
                                    std::size_t element_bytes = 4);
// Under recomputation, the most a backward rebuilds at once: one layer's output (the output layer's is not needed).
std::uint64_t rebuilt_activation_bytes(const MlpConfig& cfg, int first, int last, int rows, int tp,
                                       std::size_t element_bytes = 4);
// The sizes of ActivationOffload's activations for the layers [first, last) (mlp::KeepOptions::offload): one layer's
// block holds its input and its output (its input alone under recomputation), each as wide as the widest of the
// range at this tp rank's widths.
std::vector<std::size_t> offloaded_activation_bytes(const MlpConfig& cfg, int first, int last, int rows, int tp,
                                                    bool recompute = false, std::size_t element_bytes = 4);
// Elements of the largest all-reduce the layers [first, last) issue over tp (a column-parallel layer's input gradient
// [rows, in], a row-parallel layer's output [rows, out]); 0 when none splits.
std::uint64_t largest_tp_all_reduce(const MlpConfig& cfg, int first, int last, int rows);

}  // namespace strata::mlp
