// GptModel: the GPT-2 of docs/gpt-model.md on a ShardedModel: units, init, and one
// micro-batch of forward and backward through the kernels of its device (GptKernels: CPU or CUDA).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "core/device.h"
#include "models/gpt/tensor_parallel.h"
#include "runtime/sharding/sharded_model.h"

namespace strata::gpt {

struct GptConfig {
  int layers = 2;
  int heads = 2;
  int embd = 32;
  int vocab = 64;
  int ctx = 16;  // positions in wpe (Tctx)
  void validate() const;
  std::string describe() const;
  // kInvalidArgument naming the values when the model cannot be split over `tp` ranks (heads, embd; seq under
  // sequence parallelism). The vocabulary need not divide: it is padded.
  void validate_tp(int tp, bool sequence_parallel, int seq) const;
  // kInvalidArgument naming the quantity and its factors when a size this model needs on one rank (parameters,
  // activations, logits, for `batch` rows of `seq` tokens split over `tp`) overflows its integer type or could never
  // be allocated (above kMaxAddressableBytes of core/checked_math.h). Run before anything is allocated.
  void validate_sizes(int batch, int seq, int tp) const;
};

// Tensor parallelism (docs/tensor-parallel.md): Megatron-LM's split of each block over the `tp` group, the
// vocabulary-parallel embedding / LM head / cross-entropy, and optionally sequence parallelism.
struct GptParallel {
  Communicator* tp = nullptr;      // the tensor-parallel group; null: tp 1
  bool sequence_parallel = false;  // LayerNorm and residual regions hold T / tp of the sequence
  bool tp_kernels = false;         // the tensor-parallel kernels and data flow even at tp 1 (tests)
};

// One unit for the embeddings (wte, wpe; wte is also the tied LM head), one per block "h.{i}", one for "ln_f".
// Under tensor parallelism of degree `tp` the slots hold this rank's slices (SlotSpec::tp has the split; shapes are
// local): qkv and c_fc column-parallel, the two c_proj row-parallel, wte by vocabulary rows (padded to a multiple of
// tp), the rest replicated.
std::vector<UnitSpec> gpt_units(const GptConfig& cfg, int tp = 1);
// The vocabulary rows each tp rank holds: ceil(vocab / tp).
int vocab_per_rank(const GptConfig& cfg, int tp);
int embeddings_unit();
int block_unit(int layer);  // 1 + layer
int final_norm_unit(const GptConfig& cfg);

// The spec's init distributions from our own counter-based generator: element k of a parameter depends only on
// (seed, parameter name, k), so any rank can fill any shard and the result does not depend on the rank count.
void spec_init(const GptConfig& cfg, const ParamSlot& slot, std::size_t begin, std::size_t count, float* out,
               std::uint64_t seed);

class GptModel {
 public:
  // B rows of T tokens per micro-batch on this rank. recompute: keep only each block's input and recompute its
  // forward during its backward.
  GptModel(const GptConfig& cfg, ShardedModel& model, Device& device, int B, int T, bool recompute,
           const GptParallel& parallel = {});
  ~GptModel();

  // Forward and backward of one micro-batch; gradients (scaled by grad_scale / (B*T)) are added into Strata's
  // buffers. inputs and targets are B*T tokens in host memory (copied to the device). Returns the mean
  // cross-entropy over the B*T targets.
  double forward_backward(const std::int32_t* inputs, const std::int32_t* targets, float grad_scale);
  // Forward only (evaluation).
  double forward_loss(const std::int32_t* inputs, const std::int32_t* targets);

  // Bytes of activations this model keeps for backward at its peak (as allocated, category kActivations).
  std::size_t activation_bytes_kept() const;
  // The tp collectives' traffic since construction or the last reset.
  const TpTraffic& tp_traffic() const;
  void reset_tp_traffic();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::gpt
