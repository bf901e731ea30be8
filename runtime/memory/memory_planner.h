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

// A decoder-only transformer's shape. The first six fields (ModelShape{params, layers, hidden, heads, vocab, seq})
// describe a GPT-2 block; the rest default to it and describe the Llama family (models/llama): grouped-query
// attention, a SwiGLU MLP, bias-free RMSNorm layers, rotary positions and an untied head (docs/memory-model.md).
struct ModelShape {
  double params = 0;  // total parameters; 0: computed from the dimensions below
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int vocab = 0;
  int seq = 0;  // sequence length (also the position table when computing params, unless rotary)
  int kv_heads = 0;       // key / value heads (grouped-query attention; divides heads); 0: heads
  int head_dim = 0;       // channels of a head; 0: hidden / heads
  int ffn = 0;            // the MLP's inner width; 0: 4 hidden
  bool gated = false;     // SwiGLU: gate and up [ffn, hidden] and down [hidden, ffn]; false: GELU's two matrices
  // Llama's layers: RMSNorms of one weight vector and linears without biases (but those qkv_bias and out_bias add);
  // false: GPT-2's LayerNorms (a weight and a bias) and a bias on every linear.
  bool rms_norm = false;
  bool qkv_bias = false;  // with rms_norm: q, k and v have biases (Qwen2; Llama's attention_bias with out_bias)
  bool out_bias = false;  // with rms_norm: the attention's output projection has a bias (Llama's attention_bias)
  bool rotary = false;    // rotary positions: no position table; false: a learned [seq, hidden] table
  bool tied = true;       // the LM head is the token embedding; false: a [vocab, hidden] matrix of its own

  int kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  int head_width() const { return head_dim > 0 ? head_dim : (heads > 0 ? hidden / heads : 0); }
  std::int64_t ffn_width() const { return ffn > 0 ? ffn : 4 * static_cast<std::int64_t>(hidden); }
  // Key / value heads one rank of a tensor-parallel group of `tp` holds: kv_heads / tp, or one (replicated) when tp
  // is a multiple of kv_heads.
  int kv_heads_per_rank(int tp) const { return (kv_head_count() + tp - 1) / tp; }
  // Channels of q (and of the attention's output): heads x head_dim; hidden without head_dim.
  double q_width() const { return head_dim > 0 ? static_cast<double>(heads) * head_dim : hidden; }
  // Channels of k (and of v): kv_heads x head_width(); q_width() without kv_heads.
  double kv_width() const { return kv_heads > 0 ? static_cast<double>(kv_heads) * head_width() : q_width(); }
  // k's channels on one rank of `tp`: kv_width() / tp while tp divides the kv heads, else kv_heads_per_rank(tp) heads.
  double kv_width_per_rank(int tp) const {
    if (kv_heads <= 0 || kv_heads % tp == 0) return kv_width() / tp;
    return kv_heads_per_rank(tp) * static_cast<double>(head_width());
  }

  // Parameters from the dimensions (or `params` when given). Per layer: two norms (2h each with LayerNorm's bias, h
  // as RMSNorm); attention h NH D + 2 h KVH D + NH D h and its biases (GPT: NH D + 2 KVH D + h; rms_norm: those
  // qkv_bias and out_bias add); the MLP's 2 or 3 (gated) h ffn matrices and their biases (GPT only). Then the
  // token embedding V h, an untied head V h, the position table seq h unless rotary, and the final norm. A GPT-2
  // block (the defaults) is 12h^2 + 13h a layer.
  double count() const;
  // Parameters one rank of a tensor-parallel group of `tp` holds (Megatron-LM's split): q, o, the MLP's matrices,
  // the column-parallel biases and the token embedding and untied head (vocab-parallel, ceil(V / tp) rows each) are
  // split; k and v are split over kv_heads_per_rank(tp) heads (replicated when tp exceeds kv_heads); the norms, the
  // row-parallel biases, the position table and the final norm are replicated. A GPT-2 block: (12h^2 + 7h) / tp + 6h
  // a layer. With `params` given (no dimensions to split by): params / tp.
  double count_per_rank(int tp) const;
  // One layer's parameters on one rank of the tp group: (12h^2 + 7h) / tp + 6h for a GPT-2 block.
  double layer_per_rank(int tp) const;
  // Outside the layers on one rank: the token embedding and an untied head (ceil(V / tp) rows each) and the position
  // table (seq rows unless rotary), without the final norm.
  double embedding_per_rank(int tp) const;
  // One norm's parameters: 2h (LayerNorm) or h (RMSNorm).
  double norm_params() const;
};

// A count with thousands separators, as the planners print parameter counts: 68976648192 -> "68,976,648,192"
// (rounded to an integer; beyond 2^63 in %g form).
std::string grouped_count(double count);

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
  // would refuse: sizes < 1 (vocab and params < 0) or not finite, heads not dividing hidden (without head_dim),
  // kv_heads not dividing heads, tp not dividing heads, hidden or the MLP's width, tp that neither divides kv_heads
  // nor is a multiple of it, sequence parallelism without tp > 1 or with seq not divisible by tp, more pipeline
  // stages than layers, dp_replicate not dividing dp, parameter offload below ZeRO-3, a prefetch depth outside
  // [0, 8], more devices than nodes x devices per node (at most kMaxPlanDevices), a non-positive memory, rate or
  // efficiency. plan_memory calls it.
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
// (train_gpt has its own exact prediction, models/gpt/training/gpt_memory.h). For other shapes the tp-split 24 h is
// 4 q + 4 kv + 4 ffn (GELU) or 6 ffn (SwiGLU: gate, up, their product), q = heads x head_dim and kv the key / value
// width (the rank's kv heads x head_dim x t); the MLP's recomputation drops 2 ffn / t, the attention's 2 q / t. The
// 10 s b h stays (the norms' inputs, q k v's and the MLP's input, and the dropout masks a dropout-free model lacks).
double activation_bytes_per_layer(const PlanInput& in);
// The same for one layer of kind `kind` (kOffload: what it moves to host memory).
double activation_bytes_of(const PlanInput& in, BlockRecompute kind);
// Matrix-product FLOPs per token one layer of kind `kind` runs again in its backward, on one rank of the tp group:
// full: its forward (2 x its parameters + 4 q s, QK^T and AV, q = heads x head_dim, h for a GPT-2 block); attention:
// the core (4 q s); mlp and offload: none
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
