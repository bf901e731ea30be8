// predict_step_memory: the arithmetic behind each ledger category for the GPT trainer.
#include "models/gpt/training/gpt_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "core/byte_units.h"
#include "core/checked_math.h"
#include "models/gpt/model/block_activations.h"
#include "models/gpt/model/model_flops.h"
#include "models/gpt/parallel/gpt_parallelize.h"
#include "models/gpt/training/pipeline_rehearsal.h"
#include "runtime/memory/memory_planner.h"
#include "runtime/memory/step_memory.h"
#include "runtime/parallel/pipeline_schedule.h"
#include "runtime/sharding/shard_layout.h"
#include "runtime/sharding/sharded_unit.h"
#include "runtime/sharding/state_memory.h"

namespace strata::gpt {
namespace {

// The trainer's mesh (DeviceMesh{pp, dp_replicate, -1, tp, cp}): tp consecutive ranks share a micro-batch, and the
// world / (tp pp) ranks of a stage form dp_replicate groups of world / (tp pp dp_replicate) shards (cp ranks hold the
// same parameters and shard them with dp_shard: dp_shard_cp).
DataParallelSizes groups(const TrainConfig& cfg, int world) {
  return DataParallelSizes{world / (cfg.tp * cfg.pp * cfg.dp_replicate), cfg.dp_replicate};
}

// What one rank of a context-parallel run computes on: the rows of its two chunks (T / cp tokens), as GptModel is
// given them. Without cp, cfg itself.
TrainConfig rank_rows(const TrainConfig& cfg) {
  TrainConfig local = cfg;
  local.seq = cfg.local_seq();
  local.cp = 1;
  return local;
}

// Floats of the staging in which tp ranks that share key-value heads (fewer of them than tp ranks) sum the heads'
// weight gradients: [C, 2 kv_width] (ColumnParallelLinear::shared_staging_floats); 0 when each rank holds its own.
std::uint64_t shared_kv_staging(const TrainConfig& cfg) {
  if (cfg.model.kv() >= cfg.tp) return 0;
  return static_cast<std::uint64_t>(cfg.model.embd) * 2 * static_cast<std::uint64_t>(cfg.model.kv_width());
}

// The ring's buffers (RingAttention's constructor): two key / value blocks and two of their gradients
// [B, T / cp, 2 kv_width / tp] in comm_buffer; a block's output [B, T / cp, q_width / tp] (C / tp for GPT-2), its
// log-sum-exp and the backward's row dot [B, H / tp, T / cp] in workspace. Nothing without cp.
void add_ring(StepDeclaration& d, const TrainConfig& cfg) {
  if (cfg.cp == 1) return;
  const std::uint64_t rows = static_cast<std::uint64_t>(cfg.micro_batch_rows()) * cfg.local_seq();
  const std::uint64_t P = static_cast<std::uint64_t>(cfg.tp);  // a tp rank rings its own heads
  const std::uint64_t Q = static_cast<std::uint64_t>(cfg.model.q_width()) / P;    // C / tp for GPT-2
  const std::uint64_t KV = static_cast<std::uint64_t>(cfg.model.kv_local(cfg.tp) * cfg.model.hd());  // its k's width
  const std::uint64_t H = static_cast<std::uint64_t>(cfg.model.heads) / P;
  d.add("ring attention: two key / value blocks and two of their gradients", MemCategory::kCommBuffer,
        4 * 4 * rows * 2 * KV);
  d.add("ring attention: a block's output, its log-sum-exp, the backward's row dot", MemCategory::kWorkspace,
        4 * (rows * Q + 2 * rows * H));
}

// What pp rank `pp_rank` of a run holds (the family's plan, as GptTrainer takes it), and its sharding options.
struct PipelineView {
  GptPlan plan;  // part (chunks empty: the whole model, no pipeline; slots: micro-batches in flight), units, sharding
  int rows = 0;  // per micro-batch
  PoolPeaks pools;  // gathered and unsharded-gradient slots the rank's step holds (rehearse_pools)
};

// `pools`: the rank's pool peaks when already rehearsed (they depend on the schedule and the options, not on
// recomputation: --recompute auto's search rehearses once per stage); `rehearse` false: not wanted (the host
// memory and the offloaded activations need the part only).
PipelineView pipeline_view(const TrainConfig& cfg, int pp_rank, const PoolPeaks* pools = nullptr,
                           bool rehearse = true) {
  PipelineView v;
  std::optional<PipelineSchedule> s;
  if (cfg.pipelined()) {
    cfg.validate_pipeline();
    s = PipelineSchedule::build(cfg.pp_schedule, cfg.pp, cfg.micro_batches(), cfg.pp_virtual);
  }
  v.plan = parallelize(cfg.model, cfg.tp, cfg.sharding, s ? &*s : nullptr, pp_rank, cfg.pp_keep_gathered);
  v.rows = cfg.pipelined() ? cfg.micro_batch_rows() : cfg.batch;
  if (!cfg.pipelined()) return v;
  if (pools) v.pools = *pools;
  else if (rehearse) v.pools = rehearse_pools(cfg, pp_rank);
  return v;
}

// The blocks' activations on a rank, in floats, as GptModel allocates them (block_activations.h): at each position of
// its chunks, what the blocks there keep (the union over the chunks), per micro-batch slot; the one set its
// recomputations rebuild; and for activation offload, the host sets (per slot and offloading position) and the two
// device staging sets.
struct BlockFloats {
  std::uint64_t kept = 0, rebuilt = 0, host = 0, staging = 0;
};

BlockFloats block_floats(const TrainConfig& cfg, const GptStagePart& part, std::uint64_t N, std::uint64_t Nl,
                         std::uint64_t slots) {
  const BlockWidths widths = BlockWidths::of(cfg.model, N, Nl, cfg.tp, static_cast<std::uint64_t>(cfg.seq));
  auto floats = [&](ActMask mask) {
    std::uint64_t n = 0;
    for (int a = 0; a < kNumBlockActs; ++a)
      if (mask & act_bit(a)) n += act_floats(a, widths);
    return n;
  };
  const std::vector<LayerRange> chunks = part.chunks.empty() ? std::vector<LayerRange>{{0, cfg.model.layers}}
                                                             : part.chunks;
  const PositionPlan plan = plan_positions(chunks, cfg.recompute);
  BlockFloats b;
  for (std::size_t i = 0; i < plan.keep.size(); ++i) {
    b.kept += slots * floats(plan.keep[i]);
    if (plan.offloads[i]) b.host += slots * floats(kAllActs);
  }
  b.rebuilt = floats(plan.rebuilt);
  if (b.host > 0) b.staging = 2 * floats(kAllActs);
  return b;
}

}  // namespace

namespace {
StepDeclaration declare_step(const TrainConfig& cfg, int world, int pp_rank, const PoolPeaks* pools);
CategoryBytes predict_step(const TrainConfig& cfg, int world, int pp_rank, const PoolPeaks* pools) {
  return strata::predict_step_memory(declare_step(cfg, world, pp_rank, pools));
}
}  // namespace

CategoryBytes predict_step_memory(const TrainConfig& cfg, int world, int pp_rank) {
  return predict_step(cfg, world, pp_rank, nullptr);
}

StepDeclaration declare_step_memory(const TrainConfig& cfg, int world, int pp_rank) {
  return declare_step(cfg, world, pp_rank, nullptr);
}

namespace {
StepDeclaration declare_step(const TrainConfig& cfg, int world, int pp_rank, const PoolPeaks* pools) {
  if (cfg.cp > 1) {
    StepDeclaration d = declare_step(rank_rows(cfg), world, pp_rank, pools);
    add_ring(d, cfg);
    return d;
  }
  const PipelineView view = pipeline_view(cfg, pp_rank, pools);
  const GptStagePart& part = view.plan.part;
  const bool piped = !part.chunks.empty();
  // Bounds every product below (each term is at most a few times a size it checked) so none of them wraps around.
  cfg.model.validate_sizes(view.rows, cfg.seq, cfg.tp);
  const ShardingOptions& o = view.plan.sharding;
  // Strata's own buffers and AdamW's two moments, over the data-parallel groups, for this tp rank's slices of this
  // stage's units.
  StepDeclaration d;
  d.units = view.plan.units;
  d.sharding = o;
  d.groups = groups(cfg, world);
  d.optimizer_floats = 2;
  const std::vector<UnitSpec>& units = d.units;
  const int shard = o.stage == ZeroStage::kNone ? 1 : groups(cfg, world).shard;
  // GptModel's f32 views: the embeddings or the tied head's copy, an untied head, and the largest other unit.
  const bool tied = cfg.model.tied;
  const int last_unit = static_cast<int>(units.size()) - 1;
  const int emb_unit = part.first ? 0 : part.last && tied ? last_unit : -1;
  const int head_unit = part.last && !tied ? last_unit : -1;
  std::uint64_t emb_p = 0, head_p = 0, max_other_p = 0;
  for (std::size_t u = 0; u < units.size(); ++u) {
    const std::uint64_t p = ShardLayout(units[u].slots, shard, o.align_elements).padded_numel();
    if (static_cast<int>(u) == emb_unit)
      emb_p = p;
    else if (static_cast<int>(u) == head_unit)
      head_p = p;
    else
      max_other_p = std::max(max_other_p, p);
  }
  if (piped) {
    // The rank's step rehearsed through the real protocol: the pools grow to the most slots in use at once.
    d.held = view.pools;
  } else if (tied) {
    // The trainer keeps the embeddings unit (the tied LM head) gathered from the first forward to the head, and its
    // gradients open through the whole backward: each pool grows by one slot in the first step. An untied model
    // hands the embeddings back after the lookup and opens them last in the backward.
    d.kept_open = PoolPeaks{1, 1};
  }
  // Activations and workspace, as GptModel allocates them (f32 compute). Under tp a rank holds C / tp channels, H / tp
  // heads and ceil(V / tp) vocabulary rows; under sequence parallelism the residual stream, the LayerNorm statistics
  // and their gradients are sequence-sharded: Nl = N / tp rows. A pipeline stage keeps `slots` micro-batches of its
  // widest chunk (the first stage of 1F1B up to P).
  const bool sp = cfg.sequence_parallel;
  const bool tp_kernels = cfg.tp > 1 || sp;  // GptModel's tensor-parallel data flow
  const std::uint64_t P = static_cast<std::uint64_t>(cfg.tp);
  const std::uint64_t B = static_cast<std::uint64_t>(view.rows), T = static_cast<std::uint64_t>(cfg.seq);
  const std::uint64_t N = B * T, Nl = sp ? B * (T / P) : N, C = static_cast<std::uint64_t>(cfg.model.embd);
  std::uint64_t L = static_cast<std::uint64_t>(cfg.model.layers);
  if (piped) {
    L = 0;
    for (const LayerRange& r : part.chunks) L = std::max<std::uint64_t>(L, static_cast<std::uint64_t>(r.count()));
  }
  const std::uint64_t slots = static_cast<std::uint64_t>(view.plan.part.slots);
  const std::uint64_t Vl = static_cast<std::uint64_t>(vocab_per_rank(cfg.model, cfg.tp));
  // Per block, as its recomputation kind keeps them (block_floats): ln1, ln2 [Nl, C]; qkv, attention out, MLP pre-
  // and post-GELU [N, 12 Cl] (a Llama block: its widths); lse [N, Hl]; x_mid [Nl, C]; the norms' statistics [Nl].
  const BlockFloats blocks = block_floats(cfg, part, N, Nl, slots);
  // Per slot: block inputs and the chunk's output [Nl, C] x (L + 1); on the last stage ln_f [Nl, C] and its
  // statistics, the vocabulary-parallel logits [N, Vl], the losses [N].
  const BlockWidths w = BlockWidths::of(cfg.model, N, Nl, cfg.tp, T);
  const std::uint64_t head = part.last ? Nl * C + (w.norm_mean ? 2 : 1) * Nl + N * Vl + N : 0;
  d.add("block inputs and the chunk's output [Nl, C] x (L + 1), per micro-batch in flight", MemCategory::kActivations,
        4 * slots * (L + 1) * Nl * C);
  d.add("the final norm, its statistics, the logits [N, V / tp] and the losses, per micro-batch in flight",
        MemCategory::kActivations, 4 * slots * head);
  d.add("what the blocks keep for their backward, by recomputation kind", MemCategory::kActivations, 4 * blocks.kept);
  // Workspace: f32 parameters and gradients of the embeddings (or the head's copy), of an untied head and of the
  // largest other unit; the forward scratch (two [N, C]); under SP the reduced rows [Nl, C], a gathered LayerNorm
  // output [N, C], a gathered gradient [N, C] and a reduced one [Nl, C]; on the last stage the loss's row maxima and
  // statistics [3N] with the tp kernels; the backward scratch ([Nl, C] + [N, C] + the block's widths: [N, 12 Cl] for
  // GPT-2); what recomputation rebuilds and activation offload's two staging sets; the gradient received from the next stage [Nl, C] (a pipeline, unless every chunk
  // ends in the loss); per slot the int32 input tokens [N] (first stage) and target tokens [N] (last stage).
  const bool receives_grads = piped && !(part.last && part.chunks.size() == 1);
  const std::uint64_t scratch = 2 * N * C + (sp ? 2 * Nl * C + 2 * N * C : 0) + (tp_kernels && part.last ? 3 * N : 0) +
                                Nl * C + N * C + N * (w.att + w.qkv + w.up + w.act) + blocks.rebuilt + blocks.staging +
                                (receives_grads ? Nl * C : 0) + slots * N * ((part.first ? 1 : 0) + (part.last ? 1 : 0));
  // A Llama-style model's rotary table: cos and sin of every position [ctx, D / 2].
  const std::uint64_t rope = cfg.model.llama() ? static_cast<std::uint64_t>(cfg.model.ctx) * cfg.model.hd() : 0;
  const std::uint64_t shared = shared_kv_staging(cfg);  // ColumnParallelLinear::sum_shared_grads's staging
  d.add("f32 parameters and gradients of the embeddings (or the tied head's copy)", MemCategory::kWorkspace,
        4 * 2 * emb_p);
  d.add("f32 parameters and gradients of the untied head", MemCategory::kWorkspace, 4 * 2 * head_p);
  d.add("f32 parameters and gradients of the largest other unit", MemCategory::kWorkspace, 4 * 2 * max_other_p);
  d.add("forward and backward scratch, recomputation's rebuilt set, offload's staging, tokens", MemCategory::kWorkspace,
        4 * scratch);
  d.add("the rotary table [ctx, D]", MemCategory::kWorkspace, 4 * rope);
  d.add("shared key-value heads' gradient staging", MemCategory::kWorkspace, 4 * shared);
  // TensorParallel's staging for the sequence permutation (SP with B > 1): [B, T, C].
  if (sp && P > 1 && B > 1) d.add("the sequence permutation's staging [B, T, C]", MemCategory::kWorkspace, 4 * N * C);
  const TpStaging tp_staging = predict_tp_staging(cfg);
  d.add("tp: the compute stream's staging", MemCategory::kCommBuffer, tp_staging.compute);
  d.add("tp: the gradient norm's staging", MemCategory::kCommBuffer, tp_staging.norm);
  if (cfg.pp > 1) {
    // The MPI staging of the gradient norm's sum over the pp group (two doubles), and at the first and last stage the
    // sum of the tied embeddings' gradient shard over the pair (on the optimizer's stream).
    d.add("pp: the gradient norm's sum over the stages", MemCategory::kCommBuffer,
          all_reduce_staging(2, static_cast<std::uint64_t>(cfg.pp), 8));
    if (tied && (part.first || part.last))
      d.add("pp: the tied embeddings' gradient sum over the first and last stage", MemCategory::kCommBuffer,
            all_reduce_staging(
                ShardLayout(units[static_cast<std::size_t>(emb_unit)].slots, shard, o.align_elements).shard_numel(), 2,
                4));
  }
  return d;
}
}  // namespace

TpStaging predict_tp_staging(const TrainConfig& cfg) {
  TpStaging s;
  if (cfg.tp == 1) return s;
  const std::uint64_t P = static_cast<std::uint64_t>(cfg.tp);
  const std::uint64_t N = static_cast<std::uint64_t>(cfg.micro_batch_rows()) * static_cast<std::uint64_t>(cfg.seq);
  const std::uint64_t C = static_cast<std::uint64_t>(cfg.model.embd);
  // The compute lane's largest collective: the all-reduce of a row-parallel product [N, C] without sequence
  // parallelism; under it, the reduce-scatter of one (tp x [N / tp, C] staged) or the sum over tp of the largest
  // replicated gradient, wpe [ctx, C] (a Llama-style model has no wpe: a norm's weight [C]); the loss's statistics [2N]
  // either way.
  const std::uint64_t wpe = cfg.model.llama() ? C : static_cast<std::uint64_t>(cfg.model.ctx) * C;
  s.compute = all_reduce_staging(2 * N, P, 4);
  if (cfg.sequence_parallel)
    s.compute = std::max({s.compute, N * C * 4, all_reduce_staging(wpe, P, 4)});
  else
    s.compute = std::max(s.compute, all_reduce_staging(N * C, P, 4));
  // Key-value heads shared by tp ranks: their weight gradients [C, 2 kv_width] summed over tp (a block at a time).
  if (const std::uint64_t shared = shared_kv_staging(cfg); shared > 0)
    s.compute = std::max(s.compute, all_reduce_staging(shared, P, 4));
  s.norm = all_reduce_staging(2, P, 8);  // the gradient norm's two doubles
  return s;
}

CategoryBytes predict_host_memory(const TrainConfig& cfg, int world, int pp_rank) {
  const PipelineView view = pipeline_view(cfg, pp_rank, nullptr, false);
  return predict_state_memory(view.plan.units, view.plan.sharding, groups(cfg, world), 2).host;
}

std::uint64_t predict_offloaded_activations(const TrainConfig& cfg, int pp_rank) {
  if (cfg.cp > 1) return predict_offloaded_activations(rank_rows(cfg), pp_rank);
  const PipelineView view = pipeline_view(cfg, pp_rank, nullptr, false);
  const std::uint64_t P = static_cast<std::uint64_t>(cfg.tp);
  const std::uint64_t N = static_cast<std::uint64_t>(view.rows) * static_cast<std::uint64_t>(cfg.seq);
  const std::uint64_t Nl = cfg.sequence_parallel ? N / P : N;
  return 4 * block_floats(cfg, view.plan.part, N, Nl, static_cast<std::uint64_t>(view.plan.part.slots)).host;
}

std::string fit_advice(const TrainConfig& cfg, int world, std::uint64_t budget, int pp_rank) {
  const std::uint64_t now = total(predict_step_memory(cfg, world, pp_rank));
  if (now <= budget)
    return fmt::format(
        "the prediction for this configuration ({:.1f} MiB per rank) is within the budget of {:.1f} "
        "MiB left to it: what else allocates on the device?",
        mib(now), mib(budget));
  PlanInput in;
  in.model = ModelShape{0, cfg.model.layers, cfg.model.embd, cfg.model.heads, cfg.model.vocab, cfg.seq};
  in.layout.dp = world / (cfg.tp * cfg.pp * cfg.cp);
  in.layout.cp = cfg.cp;
  in.layout.pp = cfg.pp;
  in.layout.tp = cfg.tp;
  in.layout.sequence_parallel = cfg.sequence_parallel;
  in.layout.stage = cfg.sharding.stage;
  in.layout.dp_replicate = cfg.dp_replicate;
  in.precision = cfg.sharding.mixed_precision;
  in.micro_batch = cfg.batch;
  in.recompute = cfg.recompute;
  in.prefetch_depth = cfg.sharding.prefetch_depth;
  in.offload = cfg.sharding.offload;
  for (const PlanChange& change : fit_changes(in)) {
    // The run's tp and pp stay (a change of either changes the data-parallel size and the batch each rank sees).
    if (change.in.layout.tp != cfg.tp || change.in.layout.pp != cfg.pp) continue;
    // Sequence parallelism does not compose with cp (TrainConfig::validate_context): not advice for a cp run.
    if (cfg.cp > 1 && change.in.layout.sequence_parallel) continue;
    TrainConfig c = cfg;
    c.sharding.stage = change.in.layout.stage;
    c.sharding.offload = change.in.offload;
    c.recompute = change.in.recompute;
    c.sequence_parallel = change.in.layout.sequence_parallel;
    const std::uint64_t need = total(predict_step_memory(c, world, pp_rank));
    if (need <= budget)
      return fmt::format(
          "predicted {:.1f} MiB per rank against the {:.1f} MiB of the budget left to training; the cheapest change "
          "that fits: {} ({:.1f} MiB per rank predicted)",
          mib(now), mib(budget), change.what, mib(need));
  }
  return fmt::format(
      "predicted {:.1f} MiB per rank against the {:.1f} MiB of the budget left to training, and no change of stage, "
      "recomputation{} or offload fits: use more ranks, a smaller --batch or --seq, or more memory",
      mib(now), mib(budget), cfg.tp > 1 && !cfg.sequence_parallel ? ", sequence parallelism" : "");
}

std::uint64_t predict_cp_bytes(const TrainConfig& cfg, int pp_rank) {
  if (cfg.cp == 1) return 0;
  const std::uint64_t cp = static_cast<std::uint64_t>(cfg.cp);
  const std::uint64_t block = 4 * static_cast<std::uint64_t>(cfg.micro_batch_rows()) *
                              static_cast<std::uint64_t>(cfg.local_seq()) * 2 *
                              static_cast<std::uint64_t>(cfg.model.kv_local(cfg.tp) * cfg.model.hd());
  // The layers of this pp rank's stage (all of them without a pipeline).
  const GptStagePart part = pipeline_view(cfg, pp_rank, nullptr, false).plan.part;
  const std::vector<LayerRange> chunks =
      part.chunks.empty() ? std::vector<LayerRange>{{0, cfg.model.layers}} : part.chunks;
  std::uint64_t blocks = 0;
  for (const LayerRange& r : chunks)
    for (int l = r.first; l < r.last; ++l) {
      const BlockRecompute kind = cfg.recompute.at(l);
      const bool again = kind == BlockRecompute::kAttention || kind == BlockRecompute::kFull;
      blocks += (cp - 1) * (again ? 3 : 2) + cp;
    }
  return blocks * block * static_cast<std::uint64_t>(cfg.micro_batches_per_step());
}

TpTraffic predict_tp_traffic(const TrainConfig& cfg) {
  TpTraffic t;
  if (cfg.tp == 1) return t;
  cfg.model.validate_sizes(cfg.batch, cfg.seq, cfg.tp);  // bounds N x C x L; --grad-accum multiplies, checked below
  const std::uint64_t N = static_cast<std::uint64_t>(cfg.micro_batch_rows()) * cfg.seq;
  const std::uint64_t C = static_cast<std::uint64_t>(cfg.model.embd);
  // Micro-batches per step; under a pipeline each stage runs its own layers' share of them.
  const std::uint64_t A = static_cast<std::uint64_t>(cfg.micro_batches_per_step());
  const std::uint64_t L = static_cast<std::uint64_t>(cfg.model.layers);
  // Blocks that run their whole forward again (only full recomputation has collectives in what it reruns).
  const std::uint64_t R = static_cast<std::uint64_t>(cfg.recompute.count(BlockRecompute::kFull, cfg.model.layers));
  // Per micro-batch: the embedding (1), two row-parallel outputs per block in the forward (again under full
  // recomputation), the LM head's input gradient (1) and two column-parallel input gradients per block; the loss's
  // row maxima, sums and target logits (3N floats).
  const std::uint64_t reductions = 1 + 2 * L + 2 * R + 1 + 2 * L;
  // Key-value heads shared by tp ranks: per block q | k | v's weight gradient columns [C, 2 kv_width] summed over
  // tp, and its bias's [2 kv_width] (ColumnParallelLinear::sum_shared_grads).
  const bool shared = cfg.model.kv() < cfg.tp;
  const std::uint64_t KV2 = 2 * static_cast<std::uint64_t>(cfg.model.kv_width());
  const std::uint64_t shared_floats = shared ? L * (C * KV2 + (cfg.model.qkv_bias ? KV2 : 0)) : 0;
  const std::uint64_t shared_calls = shared ? L * (cfg.model.qkv_bias ? 2 : 1) : 0;
  if (!cfg.sequence_parallel) {
    t.all_reduce_bytes = checked_product("tp all-reduce bytes (--grad-accum x 4 x per micro-batch floats)", A, 4,
                                         reductions * N * C + 3 * N + shared_floats);
    t.calls = A * (reductions + 2 + shared_calls);
    return t;
  }
  // Sequence parallelism: each reduction becomes a reduce-scatter, and the whole sequence is gathered before each
  // column-parallel matmul and before the LM head in the forward (2L + 1, and 2L more under recomputation); in the
  // backward, the output gradient before each row-parallel matmul (2L) and before the embedding's (1), and the
  // LayerNorm outputs again, which are kept on this rank's rows, for the column-parallel matmuls and the LM head
  // (2L + 1). The replicated parameters' gradients are summed over tp: GPT-2's LayerNorms (4 [C] a block, 2 at the
  // end) and wpe [ctx, C], a Llama-style model's RMSNorms (2 a block, 1 at the end).
  const std::uint64_t gathers = 2 * L + 2 * R + 1 + 2 * L + 1 + 2 * L + 1;
  t.reduce_scatter_bytes = checked_product("tp reduce-scatter bytes (--grad-accum x 4 x floats)", A, 4,
                                           reductions * N * C);
  t.all_gather_bytes = checked_product("tp all-gather bytes (--grad-accum x 4 x floats)", A, 4, gathers * N * C);
  const bool llama = cfg.model.llama();
  const std::uint64_t block_norms = llama ? 2 : 4, final_norms = llama ? 1 : 2, wpe = llama ? 0 : 1;
  t.all_reduce_bytes = A * 4 * (3 * N + L * block_norms * C + final_norms * C +
                                wpe * static_cast<std::uint64_t>(cfg.model.ctx) * C + shared_floats);
  t.calls = A * (reductions + gathers + 2 + block_norms * L + final_norms + wpe + shared_calls);
  return t;
}

RecomputePolicy choose_recompute(const TrainConfig& cfg, int world, std::uint64_t budget, std::string* error) {
  std::vector<std::vector<int>> stages;
  if (!cfg.pipelined()) {
    stages.emplace_back();
    for (int l = 0; l < cfg.model.layers; ++l) stages.back().push_back(l);
  } else {
    for (int r = 0; r < cfg.pp; ++r) {
      stages.emplace_back();
      for (const LayerRange& c : GptStagePart::of_rank(cfg.model, cfg.pp, cfg.pp_virtual, r, 1).chunks)
        for (int l = c.first; l < c.last; ++l) stages.back().push_back(l);
    }
  }
  std::vector<PoolPeaks> pools;  // rehearsed once per stage: recomputation does not change them
  for (int r = 0; cfg.pipelined() && r < cfg.pp; ++r) {
    TrainConfig c = cfg;
    c.recompute = RecomputePolicy{};
    pools.push_back(rehearse_pools(c, r));
  }
  auto trial = [&](const RecomputePolicy& p, int stage) -> std::optional<RecomputeCost> {
    TrainConfig c = cfg;
    c.recompute = p;
    const std::uint64_t need =
        total(predict_step(c, world, stage, pools.empty() ? nullptr : &pools[static_cast<std::size_t>(stage)]));
    if (need > budget) return std::nullopt;
    RecomputeCost cost;
    const double gelu = 4.0 * cfg.model.embd / cfg.tp * cfg.seq * cfg.micro_batch_rows();  // [N, 4C / tp]
    for (int l : stages[static_cast<std::size_t>(stage)]) {
      cost.flops += static_cast<double>(ModelFlops::recompute_per_token(cfg.model, cfg.seq, p.at(l)));
      if (p.at(l) == BlockRecompute::kMlp) cost.elementwise += gelu;
    }
    cost.offload_bytes = 2.0 * static_cast<double>(predict_offloaded_activations(c, stage));
    cost.memory = static_cast<double>(need);
    return cost;
  };
  int failed = -1;
  RecomputePolicy chosen =
      strata::choose_recompute(cfg.model.layers, stages, every_block_recompute(), trial, &failed);
  if (failed >= 0 && error) {
    TrainConfig c = cfg;
    c.recompute = RecomputePolicy::full();
    *error = fmt::format(
        "--recompute auto: no recomputation or activation offload of the blocks{} fits the {} bytes per rank left "
        "to training (full recomputation of every block: {} bytes predicted); {}",
        cfg.pipelined() ? fmt::format(" of pipeline stage {}", failed) : std::string(), budget,
        total(predict_step_memory(c, world, failed)), fit_advice(c, world, budget, failed));
  }
  return chosen;
}

std::string prediction_table(const CategoryBytes& predicted, const CategoryBytes& measured) {
  std::string out = fmt::format("  {:<18} {:>14} {:>14} {:>9}\n", "category", "predicted", "measured", "ratio");
  for (std::size_t i = 0; i < kNumMemCategories; ++i) {
    if (predicted[i] == 0 && measured[i] == 0) continue;
    double ratio = predicted[i] ? static_cast<double>(measured[i]) / static_cast<double>(predicted[i]) : 0.0;
    out += fmt::format("  {:<18} {:>14} {:>14} {:>9.4f}\n", mem_category_name(static_cast<MemCategory>(i)),
                       predicted[i], measured[i], ratio);
  }
  return out;
}

}  // namespace strata::gpt
