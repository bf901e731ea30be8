// GptModel: the GPT-2 of docs/gpt-model.md, or a Llama-style model (docs/llama-model.md), on a ShardedModel: units,
// init, and one micro-batch of forward and backward through the kernels of its device (Kernels: CPU or CUDA).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "core/device.h"
#include "kernels/cpu/rope.h"
#include "models/llama/llama_config.h"
#include "runtime/memory/recompute_policy.h"
#include "runtime/tensor/tensor_parallel.h"
#include "runtime/parallel/pipeline_schedule.h"
#include "runtime/sharding/sharded_model.h"

namespace strata::gpt {

// The model families this model computes (docs/llama-model.md): GPT-2 (LayerNorm with biases, learned positions, a
// GELU MLP of 4 embd, a bias on every product, the head tied to wte) and the Llama-style decoders of Hugging Face's
// LlamaConfig (RMSNorm, rotary positions, a SwiGLU MLP of `ffn`, grouped-query attention, no biases but optional
// q, k, v ones, a tied or untied head). One block serves both: the family picks its norm, positions, MLP and biases.
enum class Family { kGpt2, kLlama };
// "gpt2" or "llama" (train_gpt --family, checkpoints' record); parse_family refuses any other name, listing both.
const char* family_name(Family family);
Family parse_family(const std::string& name);

struct GptConfig {
  GptConfig() = default;
  // A GPT-2 of these dimensions.
  GptConfig(int layers_, int heads_, int embd_, int vocab_, int ctx_)
      : layers(layers_), heads(heads_), embd(embd_), vocab(vocab_), ctx(ctx_) {}
  int layers = 2;
  int heads = 2;
  int embd = 32;  // the residual width (hidden_size)
  int vocab = 64;
  int ctx = 16;  // positions: wpe's rows (GPT-2), the rotary table's (Llama)
  // Llama-style only (GPT-2 takes the defaults): key-value heads (0: heads; a divisor of heads), a head's channels
  // (0: embd / heads), the MLP's width (0: 4 embd), RMSNorm's eps, the rotary embedding, q, k, v biases, the head.
  int kv_heads = 0;
  int head_dim = 0;
  int ffn = 0;
  float norm_eps = 1e-5f;
  double rope_theta = 10000.0;
  cpu::RopeScaling rope_scaling;
  bool qkv_bias = false;
  bool tied = true;
  Family family = Family::kGpt2;

  bool llama() const { return family == Family::kLlama; }
  int kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int hd() const { return head_dim > 0 ? head_dim : embd / heads; }
  int q_width() const { return heads * hd(); }    // the attention's width (q, its output)
  int kv_width() const { return kv() * hd(); }    // k's and v's
  // The key-value heads a tp rank holds at degree `tp`: its kv / tp, or above kv ranks one, shared by tp / kv ranks
  // (the query heads of those ranks attend to it; TpSplit::atom).
  int kv_local(int tp) const { return kv() >= tp ? kv() / tp : 1; }
  int mlp_width() const { return ffn > 0 ? ffn : 4 * embd; }
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

// The GptConfig of a LlamaConfig (models/llama: a preset or a Hugging Face config.json); kUnsupported for Llama's
// attention_bias (a bias on o as well: not built; Qwen2's q, k, v biases are).
GptConfig llama_model(const llama::LlamaConfig& config);

// Tensor parallelism (docs/tensor-parallel.md): Megatron-LM's split of each block over the `tp` group, the
// vocabulary-parallel embedding / LM head / cross-entropy, and optionally sequence parallelism.
struct GptParallel {
  Communicator* tp = nullptr;      // the tensor-parallel group; null: tp 1
  bool sequence_parallel = false;  // LayerNorm and residual regions hold T / tp of the sequence
  bool tp_kernels = false;         // the tensor-parallel kernels and data flow even at tp 1 (tests)
  // The context-parallel group (runtime/context): null, or one rank, is cp 1. Above one rank, the model's T is this
  // rank's share of each row (its two mirrored chunks, ContextChunks), the attention is a ring over the group, and the
  // positions are the chunks' (tp 1, no pipeline: TrainConfig::validate_context).
  Communicator* cp = nullptr;
};

// The part of the model one pipeline-parallel rank holds (docs/pipeline-parallel.md): its chunks of consecutive
// layers, in the order of their stages; the embeddings when its first chunk is the first stage; ln_f, the LM head and
// the loss when its last chunk is the last stage. The LM head multiplies by wte: a last stage that is not also the
// first holds a copy of the embeddings unit (unit "lm_head", the same slots), kept equal to the first stage's by
// summing their gradients. The default is the whole model on one rank.
struct GptStagePart {
  std::vector<LayerRange> chunks;  // empty: one chunk of every layer
  bool first = true;
  bool last = true;
  int slots = 1;  // micro-batches whose activations are kept at once (the schedule's most in flight on this rank)
  bool tied = true;  // the LM head is wte (GPT-2; a tied Llama), else a unit of its own on the last stage
  // The part of pp rank `rank` under a schedule of `pp` ranks and `virtual_stages` chunks each (split_layers).
  static GptStagePart of_rank(const GptConfig& cfg, int pp, int virtual_stages, int rank, int slots);
  // Whether the part holds a copy of the embeddings as its LM head (the last stage on a rank without the first).
  bool holds_tied_copy() const { return tied && last && !first; }
};

// Where a part's units are among gpt_units(cfg, tp, part): chunk c's are [first[c], first[c + 1]) (the embeddings in
// the first chunk, ln_f and the head's copy in the last); the embeddings, ln_f and the unit whose wte is the LM head
// (-1 where the part has none; head == emb when the part holds both ends).
struct GptStageUnits {
  std::vector<int> first;
  int emb = -1, lnf = -1, head = -1;
  int chunks() const { return static_cast<int>(first.size()) - 1; }
};
GptStageUnits stage_units(const GptConfig& cfg, const GptStagePart& part);

// One unit for the embeddings (wte, wpe; wte is also the tied LM head), one per block "h.{i}", one for "ln_f"; a
// Llama-style model's are "embeddings", "layers.{i}", "norm" and, untied, "output" (gpt_units.cc has the slots).
// Under tensor parallelism of degree `tp` the slots hold this rank's slices (SlotSpec::tp has the split; shapes are
// local): qkv and c_fc column-parallel, the two c_proj row-parallel, wte by vocabulary rows (padded to a multiple of
// tp), the rest replicated.
std::vector<UnitSpec> gpt_units(const GptConfig& cfg, int tp = 1);
// The units of one pipeline part, in this order: embeddings (first), its chunks' blocks, ln_f and lm_head (last; the
// copy only when the part is not also first).
std::vector<UnitSpec> gpt_units(const GptConfig& cfg, int tp, const GptStagePart& part);
// The name of the tied copy's unit.
inline constexpr const char* kTiedHeadUnit = "lm_head";
// The vocabulary rows each tp rank holds: ceil(vocab / tp).
int vocab_per_rank(const GptConfig& cfg, int tp);
int embeddings_unit();
int block_unit(int layer);  // 1 + layer
int final_norm_unit(const GptConfig& cfg);  // an untied head's unit follows it

// The spec's init distributions from our own counter-based generator: element k of a parameter depends only on
// (seed, parameter name, k), so any rank can fill any shard and the result does not depend on the rank count.
void spec_init(const GptConfig& cfg, const ParamSlot& slot, std::size_t begin, std::size_t count, float* out,
               std::uint64_t seed);

// How the model computes: kF32 (exact f32) or kBF16 (bf16 mixed precision: the products of matmuls and attention
// on bf16-rounded operands with f32 accumulation; make_kernels in kernel_table.h has the rules).
struct GptPrecision {
  DType matmul = DType::kF32;
};

class GptModel {
 public:
  // B rows of T tokens per micro-batch on this rank. recompute: what each block keeps for its backward and what it
  // recomputes or offloads instead (block_activations.h has what each kind gives up; automatic is the trainer's to
  // resolve). `part`: the stages this rank runs (pipeline parallelism); `model` holds gpt_units(cfg, tp, part).
  GptModel(const GptConfig& cfg, ShardedModel& model, Device& device, int B, int T, const RecomputePolicy& recompute,
           const GptParallel& parallel = {}, const GptStagePart& part = {}, const GptPrecision& precision = {});
  ~GptModel();

  // Forward and backward of one micro-batch; gradients (scaled by grad_scale / (B*T)) are added into Strata's
  // buffers. inputs and targets are B*T tokens in host memory (copied to the device). Returns the mean
  // cross-entropy over the B*T targets.
  double forward_backward(const std::int32_t* inputs, const std::int32_t* targets, float grad_scale);
  // Forward only (evaluation).
  double forward_loss(const std::int32_t* inputs, const std::int32_t* targets);

  // Pipeline parallelism: one chunk of the part for the micro-batch whose activations live in `slot` (in
  // [0, part.slots)). The forward of the first stage reads `inputs` (B*T host tokens), any other reads the activation
  // received into chunk_input(slot); the last stage reads `targets`, returns the mean loss over B*T and keeps
  // dlogits (scaled by grad_scale / (B*T)); other chunks return 0 and leave their output in chunk_output(chunk, slot).
  // The backward of the last stage starts from the loss; any other from the gradient received into grad_output();
  // a chunk that is not the first stage leaves d loss / d its input in grad_input(), valid until the next backward.
  double forward_chunk(int chunk, int slot, const std::int32_t* inputs, const std::int32_t* targets, float grad_scale);
  void backward_chunk(int chunk, int slot);
  float* chunk_input(int slot);
  const float* chunk_output(int chunk, int slot);
  float* grad_output();
  const float* grad_input();
  // Whether the chunk's forward reads the micro-batch's tokens (it embeds them, or it ends in the loss).
  bool chunk_reads_tokens(int chunk) const;
  // Floats of one activation or gradient between stages ([rows on this rank, C]).
  std::size_t boundary_floats() const;

  // Bytes of activations this model keeps for backward at its peak (as allocated, category kActivations).
  std::size_t activation_bytes_kept() const;
  // Activation offload's host memory (its own ledger), or nullptr when no block offloads; the bytes it has copied out
  // to host memory and back since construction.
  const Device* activation_host() const;
  struct OffloadTraffic {
    std::uint64_t out = 0, in = 0;
  };
  OffloadTraffic offload_traffic() const;
  // Bytes this rank has sent round the context-parallel ring since construction (0 without cp).
  std::uint64_t cp_bytes_sent() const;
  // The tp collectives' traffic since construction or the last reset.
  const TpTraffic& tp_traffic();
  void reset_tp_traffic();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::gpt
