// MemoryPlanner: predicts per-rank memory by category (and a step-time estimate) for a transformer under a
// parallel layout, precision, activation and offload policy, and says whether it fits and what would make it fit.
// The arithmetic is in docs/memory-model.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "runtime/memory/recompute_policy.h"
#include "runtime/sharding/sharding_options.h"

namespace strata {

struct ModelShape {
  double params = 0;  // total parameters; 0: computed from the GPT dimensions below
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int vocab = 0;
  int seq = 0;  // sequence length (also the position table when computing params)
  // Parameters of a GPT-style decoder: per layer 12h^2 + 13h, embeddings (V + seq) h, final LayerNorm 2h.
  double count() const;
  // Parameters one rank of a tensor-parallel group of `tp` holds (Megatron-LM's split): the four matrices of a layer
  // and the biases of the column-parallel ones (12h^2 + 7h) and the token embedding (vocab-parallel, ceil(V / tp)
  // rows) are split; the LayerNorms, the row-parallel biases (6h per layer), the position table and the final
  // LayerNorm are replicated. With `params` given (no dimensions to split by): params / tp.
  double count_per_rank(int tp) const;
  // One layer's parameters on one rank of the tp group: (12h^2 + 7h) / tp + 6h.
  double layer_per_rank(int tp) const;
};

struct ParallelLayout {
  int dp = 1;  // data-parallel ranks: dp_replicate x dp_shard (the mesh's dp group)
  int tp = 1;  // tensor-parallel degree (Megatron-style: each layer's matrices split t ways)
  int pp = 1;  // pipeline stages (layers split evenly; 1F1B keeps pp micro-batches in flight on the first stage)
  ZeroStage stage = ZeroStage::kParameters;
  int dp_replicate = 1;     // hybrid sharding: the state is sharded over dp / dp_replicate ranks, replicated across
  // Sequence parallelism (Korthikanti et al. 2022; needs tp > 1 to matter, and seq % tp == 0): the LayerNorm and
  // dropout regions of each layer hold seq / tp positions, so every activation term divides by tp.
  bool sequence_parallel = false;
  // Context parallelism (runtime/context, train_gpt --cp): each sequence split over cp ranks in mirrored chunks, so
  // every activation term and the logits divide by cp; the cp ranks hold the same parameters and shard the state with
  // dp (dp_shard x cp), and each keeps the ring's four key / value blocks. seq % (2 cp) == 0.
  int cp = 1;
  int shard_size() const;  // ranks that shard the state
};


struct Hardware {
  double device_memory = 80e9;  // bytes per device
  int devices_per_node = 8;
  int nodes = 1;
  double link_gbs = 0;        // per-device bandwidth of the data-parallel collectives, GB/s (0: no estimate)
  double peak_tflops = 0;     // per device, dense 16-bit (0: no estimate)
  double efficiency = 0.4;    // fraction of peak the kernels reach
  double pcie_gbs = 25;       // host <-> device for offload
};

struct PlanInput {
  ModelShape model;
  ParallelLayout layout;
  MixedPrecisionPolicy precision{DType::kBF16, DType::kF32};
  int micro_batch = 1;
  // What each layer keeps for its backward (recompute_policy.h): none, selective (mlp, attention), full (the layer's
  // input only), offload (all of it, in host memory), per layer or on every K-th one.
  RecomputePolicy recompute;
  bool tiled_attention = true;   // memory-efficient attention: no s x s score matrix
  int prefetch_depth = 1;
  OffloadPolicy offload = OffloadPolicy::kNone;
  Hardware hardware;
  // kInvalidArgument naming strata-plan's flags and the values, for anything the planner cannot compute or a run
  // would refuse: sizes < 1 (vocab and params < 0) or not finite, heads not dividing hidden, tp not dividing heads or
  // hidden, sequence parallelism without tp > 1 or with seq not divisible by tp, more pipeline stages than layers,
  // dp_replicate not dividing dp, parameter offload below ZeRO-3, a prefetch depth outside [0, 8], more devices than
  // nodes x devices per node (at most kMaxPlanDevices), a non-positive memory, rate or efficiency. plan_memory calls it.
  void validate() const;
};

// The most devices a plan may span (dp x tp x pp): keeps every degree and product an int.
inline constexpr int kMaxPlanDevices = 1 << 24;

// Bytes per rank by category, as Strata's ledger names them.
struct MemoryPlan {
  double params = 0;            // parameter storage in param dtype (the shard under ZeRO-3)
  double grads = 0;             // gradients in param dtype (full, or per-unit transient under ZeRO-2/3)
  double grad_shard = 0;        // f32 gradient accumulator
  double master = 0;            // f32 master weights (when param dtype is not f32)
  double optim_state = 0;       // Adam m and v
  double unsharded = 0;         // gathered units in flight (ZeRO-3: prefetch depth + 1 layers)
  double comm_buffers = 0;      // reduction staging (two layers' worth)
  double activations = 0;       // per the activation policy
  double host = 0;              // what offload moves to host memory (optimizer state, parameters, activations)
  double recompute_flops = 0;   // per rank per micro-batch: what recomputation runs again (model FLOPs exclude it)
  double total = 0;             // device total
  bool fits = false;
  std::string advice;           // when it does not fit: the cheapest change found that makes it fit
  double step_compute_s = 0, step_comm_s = 0;  // estimates (0 when hardware rates are not given)
  std::string table() const;    // fixed-column, one category a row, GB and bytes
  std::string json() const;
};

// Activation bytes per layer for one micro-batch (Korthikanti et al. 2022, 16-bit activations):
// s b h (34 + 5 a s / h); with tensor parallelism t, s b h (10 + 24/t + 5 a s / (h t)) (the 10 s b h of the LayerNorm
// inputs and dropout masks stay whole on every rank); with sequence parallelism too, s b h (34 + 5 a s / h) / t.
// Tiled attention drops the 5 a s^2 b score term; full recomputation keeps 2 s b h (the layer input), 2 s b h / t under
// sequence parallelism. Selective recomputation of the MLP drops the GELU's output (8 s b h / t); of the attention
// core, the scores (5 a s^2 b / t, without tiling) and the core's output (2 s b h / t), which Strata's tiled kernel
// rebuilds with them. Offload keeps nothing on the device (two layers' staging aside: plan_memory adds it). Averaged
// over the layers of in.recompute. A planner's figure for a Megatron-style model: a given trainer's buffers differ
// (train_gpt has its own exact prediction, models/gpt/training/gpt_memory.h).
double activation_bytes_per_layer(const PlanInput& in);
// The same for one layer of kind `kind` (kOffload: what it moves to host memory).
double activation_bytes_of(const PlanInput& in, BlockRecompute kind);
// Matrix-product FLOPs per token one layer of kind `kind` runs again in its backward, on one rank of the tp group:
// full: its forward (2 x its parameters + 4 h s, QK^T and AV); attention: the core (4 h s); mlp and offload: none
// (the GELU is element-wise). / tp.
double recompute_flops_per_token(const PlanInput& in, BlockRecompute kind);
// The extra forward compute of recomputation as a fraction of the layers' forward (0: none, 1: every layer full).
double recompute_forward_fraction(const PlanInput& in);

MemoryPlan plan_memory(const PlanInput& in);

// --recompute auto in the planner: a kind per layer for the first pipeline stage's layers (strata::choose_recompute),
// the same pattern on every stage, whose plan fits the device memory with the fewest FLOPs run again, then the fewest
// bytes offloaded. When nothing fits: full recomputation (plan_memory's advice then names the next change). The
// result has automatic set.
RecomputePolicy choose_plan_recompute(const PlanInput& in);

// One change to a plan's input, described with strata-plan's (and train_gpt's) flags.
struct PlanChange {
  std::string what;
  PlanInput in;
};
// The changes tried when a plan does not fit, cheapest first (recomputation, ZeRO-3, offload, then tensor and
// pipeline parallelism on the same devices). plan_memory's advice is the first that fits; a trainer with an
// exact predictor of its own (models/gpt/training/gpt_memory.h) walks the same list.
std::vector<PlanChange> fit_changes(const PlanInput& in);

// The longest sequence of `in`'s model that fits its device memory with everything else as given: the largest
// multiple of `step` (2 x cp x 64) up to 2^24 tokens whose plan fits (the plan grows with the sequence). seq 0 when
// not even one step fits, with `why` the plan's total at it; `capped` when the limit fits.
struct LongestSeq {
  int seq = 0, step = 0;
  bool capped = false;
  std::string why;
};
LongestSeq longest_fitting_seq(PlanInput in);

}  // namespace strata
