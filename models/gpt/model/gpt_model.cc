// GptModel: forward and backward of either family (GPT-2, Llama-style) over ShardedModel, through the Kernels of
// the model's device.
#include "models/gpt/model/gpt_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/hash.h"
#include "kernels/kernel_table.h"
#include "models/gpt/model/block_activations.h"
#include "models/gpt/model/block_pass.h"
#include "models/gpt/model/unit_slots.h"
#include "runtime/context/ring_attention.h"
#include "runtime/memory/activation_offload.h"
#include "runtime/tensor/parallel_linear.h"
#include "runtime/tensor/vocab_parallel.h"

namespace strata::gpt {

// ---- the model ---------------------------------------------------------------------------------------------------

namespace {

// One unit's parameters (and gradients) as f32 arrays: the gathered views themselves when they are f32, else
// converted copies in a workspace buffer (gradients added back into the views after the backward). A slot marked
// `scratch` gets its gradient in a zeroed scratch instead, to be reduced before close_grads adds it: those marked
// `tp_summed` there are summed over the tp group (under sequence parallelism each tp rank's share of a replicated
// parameter's gradient comes from its own positions).
class UnitF32 {
 public:
  UnitF32(Device& dev, Kernels& k, std::size_t max_numel) : k_(k) {
    params_ = dev.allocate(max_numel * 4, MemCategory::kWorkspace);
    grads_ = dev.allocate(max_numel * 4, MemCategory::kWorkspace);
  }
  void load(const std::vector<TensorView>& views) {
    p_.clear();
    for (const TensorView& v : views) {
      if (v.dtype == DType::kF32) {
        p_.push_back(v.as<float>());
      } else {
        float* dst = params_.as<float>() + v.slot->offset;
        k_.to_f32(v.data, v.dtype, dst, v.numel());
        p_.push_back(dst);
      }
    }
  }
  void open_grads(const std::vector<TensorView>& views, const std::vector<int>& scratch = {}) {
    g_.clear();
    scratch_.assign(views.size(), false);
    for (int k : scratch) scratch_[static_cast<std::size_t>(k)] = true;
    for (std::size_t k = 0; k < views.size(); ++k) {
      const TensorView& v = views[k];
      if (v.dtype == DType::kF32 && !scratch_[k]) {
        g_.push_back(v.as<float>());
      } else {
        float* dst = grads_.as<float>() + v.slot->offset;
        k_.zero(dst, v.numel() * 4);
        g_.push_back(dst);
        scratch_[k] = true;
      }
    }
  }
  void close_grads(const std::vector<TensorView>& views, TensorParallel& tp, const std::vector<int>& tp_summed = {}) {
    for (int k : tp_summed) tp.sum(g_[static_cast<std::size_t>(k)], views[static_cast<std::size_t>(k)].numel());
    for (std::size_t k = 0; k < views.size(); ++k) {
      const TensorView& v = views[k];
      if (scratch_[k]) k_.add_f32_into(v.data, v.dtype, g_[k], v.numel());  // the others were written in place
    }
  }
  // Slot k's f32 parameters and gradients; null for k = -1 (a weight the family does not have, unit_slots.h).
  const float* p(int k) const { return k < 0 ? nullptr : p_[static_cast<std::size_t>(k)]; }
  float* g(int k) const { return k < 0 ? nullptr : g_[static_cast<std::size_t>(k)]; }

 private:
  Kernels& k_;
  Buffer params_, grads_;
  std::vector<const float*> p_;
  std::vector<float*> g_;
  std::vector<bool> scratch_;
};

// Everything a block's backward needs from its forward (block_activations.h names them), as far as a block keeps
// it: an activation its recomputation gives up has no buffer here. Under sequence parallelism the LayerNorm outputs,
// their statistics, x_mid and the block input are this rank's rows; the backward gathers ln1 and ln2 again for the
// column-parallel matmuls (as Megatron-LM does), so no [N, C] activation is kept.
struct BlockActs {
  std::array<Buffer, kNumBlockActs> kept;
};

// Where one block's forward writes each activation and its backward reads it: its own buffer, the shared set a
// recomputation rebuilds, or the staging set of activation offload.
struct BlockViews {
  std::array<float*, kNumBlockActs> at{};
  float* operator[](int a) const { return at[static_cast<std::size_t>(a)]; }
};

// One micro-batch in flight through one chunk: what its backward needs from its forward.
struct MicroActs {
  std::vector<Buffer> x_in;     // per layer of the chunk: the block input [Nl, C]; the last is the chunk's output
  std::vector<BlockActs> acts;  // per layer of the chunk
  std::vector<int> offload_id;  // per layer of the chunk: its set in the ActivationOffload (-1: none)
  Buffer lnf, lnf_mean, lnf_rstd, logits, losses;  // the last stage (lnf_mean: LayerNorm only)
  Buffer tokens_in, tokens_tgt;                    // the micro-batch's tokens [N] in the device's memory
};

// cfg, after the checks a model of B x T tokens needs before anything is allocated.
const GptConfig& checked(const GptConfig& cfg, int B, int T, const GptParallel& parallel) {
  cfg.validate();
  STRATA_CHECK(B >= 1 && T >= 1 && T <= cfg.ctx, "batch {} x sequence {} (context {})", B, T, cfg.ctx);
  cfg.validate_sizes(B, T, parallel.tp ? parallel.tp->size() : 1);
  return cfg;
}

}  // namespace

struct GptModel::Impl : BlockOps {
  GptConfig cfg;
  ShardedModel& model;
  Device& dev;
  std::unique_ptr<Kernels> k;  // every kernel, zeroing, conversion and copy goes through it
  int B, T, N;
  RecomputePolicy recompute;
  TensorParallel tp;
  // Tensor-parallel data flow: at tp 1 (unless asked for) the plain kernels run exactly as before it existed.
  bool tpk;
  bool sp;
  int Nl;              // rows of the sequence-sharded regions on this rank
  int NHl;             // this rank's heads of attention (NH / tp)
  int D, KVHl;         // a head's channels; this rank's key-value heads
  BlockWidths w;       // this rank's widths of a block's activations (q | k | v, attention, MLP)
  BlockSlots bs;       // where each weight sits in a block unit (unit_slots.h), in the embeddings and in ln_f
  EmbeddingSlots es;
  NormSlots ns;
  Buffer rope_cos, rope_sin;  // Llama: the rotary table of every position [ctx, D / 2]
  VocabShard vocab;    // this rank's vocabulary rows, the first, and how many are real (not padding)
  int Vl;              // vocab.rows
  // The Megatron split of a block: q|k|v and c_fc column-parallel, the two c_proj row-parallel (set once tp is checked).
  std::optional<BlockLinears> linears;
  std::vector<int> block_tp_summed, emb_tp_summed, lnf_tp_summed;  // replicated slots summed over tp (SP)
  // A block's slots whose gradient goes through a scratch: block_tp_summed, and q | k | v's weight and bias when tp
  // ranks share key-value heads (their columns summed over tp by linears->qkv.sum_shared_grads, through
  // shared_staging).
  std::vector<int> block_scratch;
  Buffer shared_staging;
  GptStagePart part;
  std::vector<int> unit_of_layer;       // the ShardedModel unit of each layer this rank holds (-1: elsewhere)
  int u_emb = -1, u_lnf = -1, u_head = -1;  // the embeddings, ln_f and the LM head's unit (the embeddings when tied)
  std::vector<MicroActs> micro;   // per slot
  BlockActs rebuilt;              // what the blocks' recomputations rebuild in their backward (one set for all)
  std::unique_ptr<ActivationOffload> offload;  // the blocks whose activations wait in host memory
  Buffer attproj, fcproj;         // forward scratch [N, C]: a row-parallel product (partial under tp)
  Buffer reduced;                 // SP: a row-parallel product reduced into this rank's rows [Nl, C]
  Buffer ln_full;                 // SP: a LayerNorm's output gathered whole [N, C], for a column-parallel matmul
  Buffer vocab_max, vocab_stats;  // tp: row maxima [N], sum-exp and target logit [2N]
  Buffer dres, dln, datty, dqkv, dfch, dfch_gelu;  // backward scratch
  Buffer dfull, dln_local;        // SP: a gradient gathered whole [N, C]; a reduced one on this rank's rows [Nl, C]
  Buffer dnext;                   // pipeline: the gradient of a chunk's output, received from the next stage
  std::unique_ptr<UnitF32> emb, unit, head;  // head: an untied LM head's unit
  // Context parallelism: this rank's chunks of each row and the ring that attends over the whole sequence.
  std::optional<ContextChunks> chunks;
  std::unique_ptr<RingAttention> ring;

  Impl(const GptConfig& c, ShardedModel& m, Device& d, int b, int t, const RecomputePolicy& rc, const GptParallel& par,
       const GptStagePart& stage_part, const GptPrecision& precision)
      : cfg(c), model(m), dev(d), k(make_kernels(d, precision.matmul)), B(b), T(t), N(b * t), recompute(rc),
        tp(d, par.tp, par.sequence_parallel, b, t, c.embd), part(stage_part) {
    const int P = tp.size();
    cfg.validate_tp(P, par.sequence_parallel, T);
    recompute.validate(cfg.layers);
    STRATA_CHECK(!recompute.automatic || !recompute.per_layer.empty(), "--recompute auto is chosen by the trainer "
                 "from the memory budget; GptModel takes the chosen kind per block");
    tpk = P > 1 || par.tp_kernels || par.sequence_parallel;
    sp = par.sequence_parallel;
    if (par.cp && par.cp->size() > 1) {
      STRATA_CHECK_CODE(ErrorCode::kUnsupported, !sp,
                        "context parallelism runs without sequence parallelism so far");
      chunks = ContextChunks::of(T * par.cp->size(), par.cp->size(), par.cp->rank());
      STRATA_CHECK(chunks->seq <= cfg.ctx,
                   "the sequence of {} tokens ({} on each of {} cp ranks) exceeds the context {}", chunks->seq, T,
                   chunks->cp, cfg.ctx);
    }
    Nl = tp.local_rows();
    NHl = cfg.heads / P;
    D = cfg.hd();
    KVHl = cfg.kv_local(P);
    w = BlockWidths::of(cfg, static_cast<std::uint64_t>(N), static_cast<std::uint64_t>(Nl), P,
                        static_cast<std::uint64_t>(T));
    bs = block_slots(cfg);
    es = embedding_slots(cfg);
    ns = final_norm_slots(cfg);
    vocab = VocabShard::of(cfg.vocab, P, tp.rank());
    Vl = vocab.rows;
    linears.emplace(tp, *k, cfg);
    if (sp) {
      for (int slot : {bs.ln1w, bs.ln1b, bs.ln2w, bs.ln2b})
        if (slot >= 0) block_tp_summed.push_back(slot);
      block_scratch = block_tp_summed;
      if (es.wpe >= 0) emb_tp_summed = {es.wpe};
      for (int slot : {ns.w, ns.b})
        if (slot >= 0) lnf_tp_summed.push_back(slot);
    }
    const bool pipelined = !part.chunks.empty();
    if (!pipelined) part.chunks.push_back(LayerRange{0, cfg.layers});
    STRATA_CHECK(part.slots >= 1, "{} activation slots: a stage needs at least one", part.slots);
    // The units, in gpt_units(cfg, tp, part)'s order: a chunk's blocks follow the embeddings in the first chunk.
    const GptStageUnits places = stage_units(cfg, part);
    u_emb = places.emb;
    u_lnf = places.lnf;
    u_head = places.head;
    unit_of_layer.assign(static_cast<std::size_t>(cfg.layers), -1);
    int widest = 0;
    for (std::size_t c = 0; c < part.chunks.size(); ++c) {
      const LayerRange& r = part.chunks[c];
      widest = std::max(widest, r.count());
      const int block0 = places.first[c] + (c == 0 && part.first ? 1 : 0);
      for (int l = r.first; l < r.last; ++l) unit_of_layer[static_cast<std::size_t>(l)] = block0 + (l - r.first);
    }
    STRATA_CHECK(places.first.back() == model.num_units(), "the model holds {} units; this pipeline part needs {}",
                 model.num_units(), places.first.back());
    const std::size_t C = static_cast<std::size_t>(cfg.embd), n = static_cast<std::size_t>(N);
    const std::size_t nl = static_cast<std::size_t>(Nl);
    // validate_sizes bounded every product below; the byte counts are checked once more where they are formed.
    auto bytes = [](std::size_t floats) { return checked_mul<std::size_t>(floats, 4, "buffer bytes (4 x floats)"); };
    auto act = [&](std::size_t floats) { return dev.allocate(bytes(floats), MemCategory::kActivations); };
    auto work = [&](std::size_t floats) { return dev.allocate(bytes(floats), MemCategory::kWorkspace); };
    std::array<std::size_t, kNumBlockActs> act_bytes{};
    for (int a = 0; a < kNumBlockActs; ++a)
      act_bytes[static_cast<std::size_t>(a)] = bytes(act_floats(a, w));
    const PositionPlan plan = plan_positions(part.chunks, recompute);  // plan.keep has `widest` positions
    auto block_acts = [&](ActMask mask, MemCategory kind) {
      BlockActs set;
      for (int a = 0; a < kNumBlockActs; ++a)
        if ((mask & act_bit(a)) && act_bytes[static_cast<std::size_t>(a)] > 0)  // RMSNorm keeps no mean
          set.kept[static_cast<std::size_t>(a)] = dev.allocate(act_bytes[static_cast<std::size_t>(a)], kind);
      return set;
    };
    micro.resize(static_cast<std::size_t>(part.slots));
    int offloaded = 0;
    for (MicroActs& mb : micro) {
      for (int l = 0; l <= widest; ++l) mb.x_in.push_back(act(nl * C));
      for (int l = 0; l < widest; ++l) {
        mb.acts.push_back(block_acts(plan.keep[static_cast<std::size_t>(l)], MemCategory::kActivations));
        mb.offload_id.push_back(plan.offloads[static_cast<std::size_t>(l)] ? offloaded++ : -1);
      }
    }
    rebuilt = block_acts(plan.rebuilt, MemCategory::kWorkspace);
    if (offloaded > 0)
      offload = std::make_unique<ActivationOffload>(dev, std::vector<std::size_t>(act_bytes.begin(), act_bytes.end()),
                                                    offloaded);
    attproj = work(n * C);
    fcproj = work(n * C);
    if (sp) {
      reduced = work(nl * C);
      ln_full = work(n * C);
      dfull = work(n * C);
      dln_local = work(nl * C);
    }
    if (part.last) {
      for (MicroActs& mb : micro) {
        mb.lnf = act(nl * C);
        if (w.norm_mean) mb.lnf_mean = act(nl);
        mb.lnf_rstd = act(nl);
        mb.logits = act(n * static_cast<std::size_t>(Vl));
        mb.losses = act(n);
      }
      if (tpk) {
        vocab_max = work(n);
        vocab_stats = work(2 * n);
      }
    }
    dres = work(nl * C);
    dln = work(n * C);
    datty = work(n * w.att);
    dqkv = work(n * w.qkv);
    dfch = work(n * w.up);
    dfch_gelu = work(n * w.act);
    if (const std::size_t shared = linears->qkv.shared_staging_floats(); shared > 0) {
      shared_staging = work(shared);
      for (int slot : {bs.attnw, bs.attnb})
        if (slot >= 0) block_scratch.push_back(slot);
    }
    if (pipelined && !(part.last && part.chunks.size() == 1)) dnext = work(nl * C);
    for (MicroActs& mb : micro) {
      if (part.first) mb.tokens_in = dev.allocate(n * sizeof(std::int32_t), MemCategory::kWorkspace);
      if (part.last) mb.tokens_tgt = dev.allocate(n * sizeof(std::int32_t), MemCategory::kWorkspace);
    }
    // f32 views: the embeddings (or the tied head's copy), an untied head, and every other unit in turn.
    std::size_t emb_numel = 0, head_numel = 0, max_numel = 0;
    for (int u = 0; u < model.num_units(); ++u) {
      if (u == u_emb || (cfg.tied && u == u_head)) emb_numel = std::max(emb_numel, model.layout(u).padded_numel());
      else if (u == u_head) head_numel = model.layout(u).padded_numel();
      else max_numel = std::max(max_numel, model.layout(u).padded_numel());
    }
    if (emb_numel > 0) emb = std::make_unique<UnitF32>(dev, *k, emb_numel);
    if (head_numel > 0) head = std::make_unique<UnitF32>(dev, *k, head_numel);
    if (max_numel > 0) unit = std::make_unique<UnitF32>(dev, *k, max_numel);
    if (cfg.llama()) make_rope_table();
    if (chunks) ring = std::make_unique<RingAttention>(*par.cp, *k, *chunks, B, static_cast<int>(w.att), NHl, KVHl);
  }

  // Llama: the rotary table of positions 0 .. ctx - 1, computed on the host once and copied to the device.
  void make_rope_table() {
    const std::size_t half = static_cast<std::size_t>(D / 2), rows = static_cast<std::size_t>(cfg.ctx);
    std::vector<float> c(rows * half), sn(rows * half);
    cpu::rope_table(c.data(), sn.data(), cfg.ctx, D, cfg.rope_theta, cfg.rope_scaling);
    rope_cos = dev.allocate(c.size() * 4, MemCategory::kWorkspace);
    rope_sin = dev.allocate(sn.size() * 4, MemCategory::kWorkspace);
    dev.copy_from_host(rope_cos.data(), c.data(), c.size() * 4);
    dev.copy_from_host(rope_sin.data(), sn.data(), sn.size() * 4);
  }
  // Llama: q's and k's heads rotated in place in qkv's rows (its T positions, or its chunks' under cp); backward: the
  // gradient of the rotated q and k turned into that of the unrotated ones, in dqkv.
  void rope(float* qkv, bool backward) {
    const std::size_t stride = w.qkv;
    auto rotate = [&](float* rows, int batches, int n, int pos0) {
      for (const auto& [col, heads] : {std::pair<std::size_t, int>{0, NHl}, {w.att, KVHl}}) {
        if (backward)
          k->rope_backward(rows + col, rope_cos.as<float>(), rope_sin.as<float>(), batches, n, heads, D, pos0, stride,
                           static_cast<std::size_t>(T) * stride);
        else
          k->rope_forward(rows + col, rope_cos.as<float>(), rope_sin.as<float>(), batches, n, heads, D, pos0, stride,
                          static_cast<std::size_t>(T) * stride);
      }
    };
    if (!chunks) {
      rotate(qkv, B, T, 0);
      return;
    }
    for_each_chunk([&](std::size_t row, int pos, int n) { rotate(qkv + row * stride, 1, n, pos); });
  }
  // The family's norm of this rank's rows (LayerNorm with mean and bias, or RMSNorm), forward and backward.
  void norm_forward(float* out, float* mean, float* rstd, const float* x, const float* wt, const float* b) {
    family_norm(*k, cfg, out, mean, rstd, x, wt, b, Nl);
  }
  void norm_backward(float* dx, float* dw, float* db, const float* dout, const float* x, const float* wt,
                     const float* mean, const float* rstd) {
    if (cfg.llama()) k->rmsnorm_backward(dx, dw, dout, x, wt, rstd, Nl, cfg.embd);
    else k->layernorm_backward(dx, dw, db, dout, x, wt, mean, rstd, Nl, cfg.embd);
  }
  // The MLP's activation: GELU over the up product, or SwiGLU over gate | up; and its backward into dup (zeroed here).
  void mlp_act_forward(float* out, const float* up) { family_mlp_activation(*k, cfg, out, up, N, w.act); }
  void mlp_act_backward(float* dup, const float* dout, const float* up) {
    k->zero(dup, static_cast<std::size_t>(N) * w.up * 4);
    if (cfg.llama()) k->swiglu_backward(dup, dout, up, N, static_cast<int>(w.act));
    else k->gelu_backward(dup, up, dout, static_cast<std::size_t>(N) * w.act);
  }

  // The attention core of a block, over this rank's rows (a ring over the cp group under context parallelism);
  // multi-head: as many key / value heads (KVH) as query heads.
  void attention_forward(float* out, float* lse, const float* qkv) {
    if (ring) ring->forward(out, lse, qkv);
    else k->attention_forward(out, lse, qkv, B, T, static_cast<int>(w.att), NHl, KVHl);
  }
  void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv) {
    if (ring) ring->backward(dqkv, dout, out, lse, qkv);
    else k->attention_backward(dqkv, dout, out, lse, qkv, B, T, static_cast<int>(w.att), NHl, KVHl);
  }
  // Under the tp kernels: the position embedding of this rank's rows added to x0 (its chunks' positions under cp, its
  // sequence-parallel share's otherwise), and its gradient.
  void positions_forward(float* x0) {
    const int C = cfg.embd;
    if (es.wpe < 0) return;  // rotary positions are applied in the attention
    if (!chunks) {
      k->position_forward(x0, emb->p(es.wpe), B, tp.local_positions(), tp.first_position(), C);
      return;
    }
    for_each_chunk(
        [&](std::size_t row, int pos, int n) { k->position_forward(x0 + row * C, emb->p(es.wpe), 1, n, pos, C); });
  }
  void positions_backward(const float* dx0) {
    const int C = cfg.embd;
    if (es.wpe < 0) return;
    if (!chunks) {
      k->position_backward(emb->g(es.wpe), dx0, B, tp.local_positions(), tp.first_position(), C);
      return;
    }
    for_each_chunk(
        [&](std::size_t row, int pos, int n) { k->position_backward(emb->g(es.wpe), dx0 + row * C, 1, n, pos, C); });
  }
  // The token and position embeddings of the micro-batch's rows into x0; under context parallelism each of this
  // rank's two chunks of a row takes the positions of its place in the sequence.
  void embed(float* x0, const std::int32_t* tokens) {
    const int C = cfg.embd;
    if (es.wpe < 0) {  // the token table alone: the lookup of every row, whatever its position
      k->embedding_forward(x0, tokens, emb->p(es.wte), 0, cfg.vocab, N, C);
      return;
    }
    if (!chunks) {
      k->encoder_forward(x0, tokens, emb->p(es.wte), emb->p(es.wpe), B, T, C);
      return;
    }
    for_each_chunk([&](std::size_t row, int pos, int n) {
      k->encoder_forward(x0 + row * C, tokens + row, emb->p(es.wte), emb->p(es.wpe) + static_cast<std::size_t>(pos) * C,
                         1, n, C);
    });
  }
  void embed_backward(const float* dx0, const std::int32_t* tokens) {
    const int C = cfg.embd;
    if (es.wpe < 0) {
      k->embedding_backward(emb->g(es.wte), dx0, tokens, 0, cfg.vocab, N, C);
      return;
    }
    if (!chunks) {
      k->encoder_backward(emb->g(es.wte), emb->g(es.wpe), dx0, tokens, B, T, C);
      return;
    }
    for_each_chunk([&](std::size_t row, int pos, int n) {
      k->encoder_backward(emb->g(es.wte), emb->g(es.wpe) + static_cast<std::size_t>(pos) * C, dx0 + row * C,
                          tokens + row, 1, n, C);
    });
  }
  // fn(first local row, its position in the sequence, rows) for each chunk of each of the B rows.
  template <typename Fn>
  void for_each_chunk(Fn&& fn) {
    const int n = chunks->chunk_rows();
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < 2; ++j)
        fn(static_cast<std::size_t>(b) * T + static_cast<std::size_t>(j) * n, chunks->position(j * n), n);
  }

  MicroActs& slot_of(int slot) {
    STRATA_CHECK(slot >= 0 && slot < part.slots, "activation slot {} is outside [0, {})", slot, part.slots);
    return micro[static_cast<std::size_t>(slot)];
  }
  const LayerRange& chunk_of(int chunk) const {
    STRATA_CHECK(chunk >= 0 && chunk < static_cast<int>(part.chunks.size()), "chunk {} is outside [0, {})", chunk,
                 part.chunks.size());
    return part.chunks[static_cast<std::size_t>(chunk)];
  }
  bool has_embeddings(int chunk) const { return part.first && chunk == 0; }
  bool has_head(int chunk) const { return part.last && chunk == static_cast<int>(part.chunks.size()) - 1; }
  // Where block `local` of a chunk (kind `kind`) keeps its activations; `set`: its offload staging set.
  BlockViews views(MicroActs& mb, int local, BlockRecompute kind, int set) {
    BlockViews v;
    const ActMask dropped = dropped_by(kind);
    for (int a = 0; a < kNumBlockActs; ++a) {
      const std::size_t i = static_cast<std::size_t>(a);
      if (kind == BlockRecompute::kOffload) v.at[i] = static_cast<float*>(offload->staging(set, a));
      else if (dropped & act_bit(a)) v.at[i] = rebuilt.kept[i].as<float>();
      else v.at[i] = mb.acts[static_cast<std::size_t>(local)].kept[i].as<float>();
    }
    return v;
  }
  // Before a block's backward: what its recomputation gave up, rebuilt from what it kept (bitwise as the forward).
  void rebuild(MicroActs& mb, int local, BlockRecompute kind, const BlockViews& a, const UnitF32& p) {
    switch (kind) {
      case BlockRecompute::kFull: block_forward(mb, local, p, a); break;
      case BlockRecompute::kAttention: attention_forward(a[kActAtty], a[kActLse], a[kActQkv]); break;
      case BlockRecompute::kMlp: mlp_act_forward(a[kActFchGelu], a[kActFch]); break;
      case BlockRecompute::kNone:
      case BlockRecompute::kOffload: break;
    }
  }

  // The family's norm of this rank's rows of x into `out` ([Nl, C]); returns it whole ([N, C]: gathered along the
  // sequence into ln_full under SP).
  const float* layernorm_whole(float* out, float* mean, float* rstd, const float* x, const float* wt, const float* b) {
    norm_forward(out, mean, rstd, x, wt, b);
    return whole(out);
  }
  // A LayerNorm output kept on this rank's rows, whole: gathered into ln_full under SP, else itself.
  const float* whole(const float* ln) { return tp.to_full(ln, ln_full.as<float>(), cfg.embd); }

  // BlockOps: the training pass's arithmetic on this rank's rows (block_pass.h): the tp pieces (sequence parallel
  // or not), the norms and the residuals on this rank's rows, the MLP's activation on the whole rows.
  void norm(float* out, float* mean, float* rstd, const float* x, const float* wt, const float* b) override {
    norm_forward(out, mean, rstd, x, wt, b);
  }
  void column(bool attention, float* out, const float* ln, const float* wt, const float* b) override {
    linears->column(attention).forward(out, ln, ln_full.as<float>(), wt, b);
  }
  const float* row(bool attention, const float* in, const float* wt, const float* b) override {
    // On this rank's rows ([Nl, C]) after the reduction.
    float* partial = (attention ? attproj : fcproj).as<float>();
    return row_product(*k, linears->row(attention), tpk, partial, reduced.as<float>(), in, wt, b, N);
  }
  void mlp_act(float* out, const float* up) override { mlp_act_forward(out, up); }
  void residual(float* out, const float* a, const float* b) override {
    k->residual_forward(out, a, b, static_cast<std::size_t>(Nl) * cfg.embd);
  }

  // Block `local` of a chunk: x_in[local] to x_in[local + 1], through the family's one block (block_pass.h) with
  // the training attention: causal over the micro-batch, or a ring over cp; q and k rotated first (Llama).
  void block_forward(MicroActs& mb, int local, const UnitF32& p, const BlockViews& a) {
    const BlockBuffers b{a[kActLn1],  a[kActLn1Mean], a[kActLn1Rstd], a[kActQkv],     a[kActAtty], a[kActLse],
                         a[kActXmid], a[kActLn2],     a[kActLn2Mean], a[kActLn2Rstd], a[kActFch],  a[kActFchGelu]};
    gpt::block_forward(
        *this, bs, [&](int slot) { return p.p(slot); }, mb.x_in[static_cast<std::size_t>(local)].as<float>(),
        mb.x_in[static_cast<std::size_t>(local) + 1].as<float>(), b,
        [this](float* atty, float* lse, float* qkv) {
          if (cfg.llama()) rope(qkv, false);
          attention_forward(atty, lse, qkv);
        });
  }

  // The gradient of the LM head's input, summed over tp into this rank's rows (dln holds this rank's partial
  // [N, C]). Returns it ([Nl, C]).
  const float* reduce_input_grad() {
    if (!tpk) return dln.as<float>();
    return tp.reduce_partial(dln.as<float>(), sp ? dln_local.as<float>() : dln.as<float>(), cfg.embd);
  }

  // dres holds d(block output) on entry and d(block input) on exit (this rank's rows).
  void block_backward(MicroActs& mb, int local, const UnitF32& p, const BlockViews& a) {
    const float* x = mb.x_in[static_cast<std::size_t>(local)].as<float>();
    float* d = dres.as<float>();
    // The row-parallel c_proj: its output gradient is whole on every tp rank (gathered under SP), so the bias's
    // gradient is the whole one and equal across the tp ranks.
    float* dfull_p = dfull.as<float>();
    linears->down.backward(dfch_gelu.as<float>(), dfull_p, p.g(bs.fcprojw), p.g(bs.fcprojb), d, a[kActFchGelu],
                           p.p(bs.fcprojw));
    mlp_act_backward(dfch.as<float>(), dfch_gelu.as<float>(), a[kActFch]);
    const float* dln2 = linears->up.backward(dln.as<float>(), dln_local.as<float>(), p.g(bs.fcw), p.g(bs.fcb),
                                             dfch.as<float>(), whole(a[kActLn2]), p.p(bs.fcw));
    norm_backward(d, p.g(bs.ln2w), p.g(bs.ln2b), dln2, a[kActXmid], p.p(bs.ln2w), a[kActLn2Mean], a[kActLn2Rstd]);
    linears->out.backward(datty.as<float>(), dfull_p, p.g(bs.projw), p.g(bs.projb), d, a[kActAtty], p.p(bs.projw));
    k->zero(dqkv.data(), static_cast<std::size_t>(N) * w.qkv * 4);
    attention_backward(dqkv.as<float>(), datty.as<float>(), a[kActAtty], a[kActLse], a[kActQkv]);
    if (cfg.llama()) rope(dqkv.as<float>(), true);
    const float* dln1 = linears->qkv.backward(dln.as<float>(), dln_local.as<float>(), p.g(bs.attnw), p.g(bs.attnb),
                                              dqkv.as<float>(), whole(a[kActLn1]), p.p(bs.attnw));
    norm_backward(d, p.g(bs.ln1w), p.g(bs.ln1b), dln1, x, p.p(bs.ln1w), a[kActLn1Mean], a[kActLn1Rstd]);
  }

  // Forward of one chunk for the micro-batch in `slot`. The first stage embeds `in` (N host tokens, uploaded to
  // tokens_in: the backward reads them); the last stage computes the loss against `tgt` and returns its mean, leaving
  // dlogits (scaled by dscale) in `logits`. The embeddings unit stays open through a first stage's chunk (on one rank
  // it is also the LM head).
  double forward_chunk(int chunk, int slot, const std::int32_t* in, const std::int32_t* tgt, float dscale) {
    const int C = cfg.embd, V = cfg.vocab;
    STRATA_CHECK(T <= cfg.ctx, "sequence length {} exceeds the context {}", T, cfg.ctx);
    const LayerRange& r = chunk_of(chunk);
    MicroActs& mb = slot_of(slot);
    const bool first = has_embeddings(chunk), last = has_head(chunk);
    if (first) k->upload_tokens(mb.tokens_in.as<std::int32_t>(), in, static_cast<std::size_t>(N));
    if (last) k->upload_tokens(mb.tokens_tgt.as<std::int32_t>(), tgt, static_cast<std::size_t>(N));
    if (first) {
      emb->load(model.begin_forward(u_emb));
      float* x0 = mb.x_in[0].as<float>();
      if (!tpk) {
        embed(x0, mb.tokens_in.as<std::int32_t>());
      } else {
        // Each rank looks up the tokens of its vocabulary rows (0 for the others); the sum over tp is the embedding.
        vocab_parallel_embedding_forward(*k, tp, attproj.as<float>(), x0, mb.tokens_in.as<std::int32_t>(),
                                         emb->p(es.wte), vocab, C);
        positions_forward(x0);
      }
      if (!cfg.tied) model.end_forward(u_emb);  // not the LM head: done with
    }
    for (int l = r.first; l < r.last; ++l) {
      const int u = unit_of_layer[static_cast<std::size_t>(l)], local = l - r.first;
      const BlockRecompute kind = recompute.at(l);
      const int set = kind == BlockRecompute::kOffload ? offload->begin_forward() : -1;
      unit->load(model.begin_forward(u));
      block_forward(mb, local, *unit, views(mb, local, kind, set));
      model.end_forward(u);
      if (set >= 0) offload->end_forward(set, mb.offload_id[static_cast<std::size_t>(local)]);
    }
    double loss = 0;
    if (last) {
      unit->load(model.begin_forward(u_lnf));
      const float* lnf_whole = layernorm_whole(mb.lnf.as<float>(), mb.lnf_mean.as<float>(), mb.lnf_rstd.as<float>(),
                                               mb.x_in[static_cast<std::size_t>(r.count())].as<float>(),
                                               unit->p(ns.w), unit->p(ns.b));
      model.end_forward(u_lnf);
      const bool own_head = !cfg.tied || !first;  // the head's unit is opened here (an untied head, a tied copy)
      UnitF32& hu = cfg.tied ? *emb : *head;
      if (own_head) hu.load(model.begin_forward(u_head));
      float* logits = mb.logits.as<float>();
      const std::int32_t* targets = mb.tokens_tgt.as<std::int32_t>();
      k->lm_head_forward(logits, lnf_whole, hu.p(head_slot()), N, C, Vl);
      if (!tpk) {
        k->crossentropy_softmax(mb.losses.as<float>(), logits, logits, targets, N, V, dscale);
      } else {
        // Vocabulary-parallel: the row maxima and the sums of exponentials are reduced over tp, never the logits.
        vocab_parallel_cross_entropy(*k, tp, mb.losses.as<float>(), logits, logits, targets, vocab, dscale,
                                     vocab_max.as<float>(), vocab_stats.as<float>());
      }
      if (own_head) model.end_forward(u_head);
    }
    if (first && cfg.tied) model.end_forward(u_emb);
    if (last) loss = k->sum(mb.losses.as<float>(), static_cast<std::size_t>(N)) / N;
    return loss;
  }

  // The slot of the LM head's weight in its unit: wte in the embeddings (tied), output.weight alone (untied).
  int head_slot() const { return cfg.tied ? es.wte : 0; }
  void open_embeddings(std::optional<BackwardViews>& ev, int u) {
    ev.emplace(model.begin_backward(u));
    emb->load(ev->params);
    emb->open_grads(ev->grads, emb_tp_summed);
  }

  // Backward of one chunk for the micro-batch in `slot`: from the loss (last stage) or from dnext, the gradient the
  // next stage sent; leaves d(chunk input) in dres unless the chunk is the first stage.
  void backward_chunk(int chunk, int slot) {
    const int C = cfg.embd;
    const LayerRange& r = chunk_of(chunk);
    MicroActs& mb = slot_of(slot);
    const bool first = has_embeddings(chunk), last = has_head(chunk);
    // Tied: the embeddings (first stage) or the LM head's copy (last stage), open through the chunk. Untied: the head
    // is opened and closed on its own, the embeddings after the blocks (the units' reverse order).
    std::optional<BackwardViews> ev;
    if (cfg.tied && (first || last)) open_embeddings(ev, first ? u_emb : u_head);
    if (last) {
      std::optional<BackwardViews> hv;
      if (!cfg.tied) {
        hv.emplace(model.begin_backward(u_head));
        head->load(hv->params);
        head->open_grads(hv->grads);
      }
      UnitF32& hu = cfg.tied ? *emb : *head;
      k->zero(dln.data(), static_cast<std::size_t>(N) * C * 4);
      k->lm_head_backward(dln.as<float>(), hu.g(head_slot()), mb.logits.as<float>(), whole(mb.lnf.as<float>()),
                          hu.p(head_slot()), N, C, Vl);
      if (hv) {
        head->close_grads(hv->grads, tp);
        model.end_backward(u_head);
      }
      const float* dlnf = reduce_input_grad();
      BackwardViews fv = model.begin_backward(u_lnf);
      unit->load(fv.params);
      unit->open_grads(fv.grads, lnf_tp_summed);
      k->zero(dres.data(), static_cast<std::size_t>(Nl) * C * 4);
      norm_backward(dres.as<float>(), unit->g(ns.w), unit->g(ns.b), dlnf,
                    mb.x_in[static_cast<std::size_t>(r.count())].as<float>(), unit->p(ns.w), mb.lnf_mean.as<float>(),
                    mb.lnf_rstd.as<float>());
      unit->close_grads(fv.grads, tp, lnf_tp_summed);
      model.end_backward(u_lnf);
      if (cfg.tied && !first) {  // the copy's gradient is complete: hand the unit back before the blocks
        emb->close_grads(ev->grads, tp, emb_tp_summed);
        model.end_backward(u_head);
        ev.reset();
      }
    } else {
      dev.copy(dres.data(), dnext.data(), static_cast<std::size_t>(Nl) * C * 4, dev.compute_stream());
    }
    for (int l = r.last - 1; l >= r.first; --l) {
      const int u = unit_of_layer[static_cast<std::size_t>(l)], local = l - r.first;
      const BlockRecompute kind = recompute.at(l);
      const int id = mb.offload_id[static_cast<std::size_t>(local)];
      const int set = kind == BlockRecompute::kOffload ? offload->begin_backward(id) : -1;
      for (int m = l - 1; set >= 0 && m >= r.first; --m) {  // the next offloaded block's copy overlaps this one
        if (recompute.at(m) != BlockRecompute::kOffload) continue;
        offload->prefetch(mb.offload_id[static_cast<std::size_t>(m - r.first)]);
        break;
      }
      BackwardViews bv = model.begin_backward(u);
      unit->load(bv.params);
      const BlockViews a = views(mb, local, kind, set);
      rebuild(mb, local, kind, a, *unit);
      unit->open_grads(bv.grads, block_scratch);
      block_backward(mb, local, *unit, a);
      if (shared_staging)
        linears->qkv.sum_shared_grads(unit->g(bs.attnw), unit->g(bs.attnb), shared_staging.as<float>());
      unit->close_grads(bv.grads, tp, block_tp_summed);
      model.end_backward(u);
      if (set >= 0) offload->end_backward(set);
    }
    if (first) {
      if (!ev) open_embeddings(ev, u_emb);  // untied: not opened with the head
      if (!tpk) {
        embed_backward(dres.as<float>(), mb.tokens_in.as<std::int32_t>());
      } else {
        positions_backward(dres.as<float>());
        vocab_parallel_embedding_backward(*k, tp, emb->g(es.wte), dres.as<float>(), dfull.as<float>(),
                                          mb.tokens_in.as<std::int32_t>(), vocab, C);
      }
      emb->close_grads(ev->grads, tp, emb_tp_summed);
      model.end_backward(u_emb);
    }
  }
};

GptModel::GptModel(const GptConfig& cfg, ShardedModel& model, Device& device, int B, int T,
                   const RecomputePolicy& recompute,
                   const GptParallel& parallel, const GptStagePart& part, const GptPrecision& precision)
    : impl_(std::make_unique<Impl>(checked(cfg, B, T, parallel), model, device, B, T, recompute, parallel, part,
                                   precision)) {}

GptModel::~GptModel() = default;

namespace {
void check_whole(const GptStagePart& part, const char* call) {
  STRATA_CHECK(part.first && part.last && part.chunks.size() == 1, "GptModel::{} runs the whole model; this rank "
               "holds one part of a pipeline (use forward_chunk / backward_chunk)", call);
}
}  // namespace

double GptModel::forward_backward(const std::int32_t* inputs, const std::int32_t* targets, float grad_scale) {
  check_whole(impl_->part, "forward_backward");
  double loss = impl_->forward_chunk(0, 0, inputs, targets, grad_scale / static_cast<float>(impl_->N));
  impl_->backward_chunk(0, 0);
  return loss;
}

std::uint64_t GptModel::cp_bytes_sent() const { return impl_->ring ? impl_->ring->bytes_sent() : 0; }

double GptModel::forward_loss(const std::int32_t* inputs, const std::int32_t* targets) {
  check_whole(impl_->part, "forward_loss");
  // A forward with no backward still goes through the protocol: forward marks units done, so nothing to undo.
  return impl_->forward_chunk(0, 0, inputs, targets, 0.0f);
}

double GptModel::forward_chunk(int chunk, int slot, const std::int32_t* inputs, const std::int32_t* targets,
                               float grad_scale) {
  return impl_->forward_chunk(chunk, slot, inputs, targets, grad_scale / static_cast<float>(impl_->N));
}

void GptModel::backward_chunk(int chunk, int slot) { impl_->backward_chunk(chunk, slot); }

float* GptModel::chunk_input(int slot) { return impl_->slot_of(slot).x_in[0].as<float>(); }

const float* GptModel::chunk_output(int chunk, int slot) {
  return impl_->slot_of(slot).x_in[static_cast<std::size_t>(impl_->chunk_of(chunk).count())].as<float>();
}

float* GptModel::grad_output() {
  STRATA_CHECK(impl_->dnext.data(), "grad_output(): this rank's stages all end in the loss");
  return impl_->dnext.as<float>();
}

const float* GptModel::grad_input() { return impl_->dres.as<float>(); }

bool GptModel::chunk_reads_tokens(int chunk) const {
  return impl_->has_embeddings(chunk) || impl_->has_head(chunk);
}

std::size_t GptModel::boundary_floats() const { return static_cast<std::size_t>(impl_->Nl) * impl_->cfg.embd; }

std::size_t GptModel::activation_bytes_kept() const {
  std::size_t total = 0;
  for (const MicroActs& mb : impl_->micro) {
    for (const Buffer& b : mb.x_in) total += b.bytes();
    for (const BlockActs& a : mb.acts)
      for (const Buffer& b : a.kept) total += b.bytes();
    for (const Buffer* b : {&mb.lnf, &mb.lnf_mean, &mb.lnf_rstd, &mb.logits, &mb.losses}) total += b->bytes();
  }
  return total;
}

const Device* GptModel::activation_host() const { return impl_->offload ? &impl_->offload->host() : nullptr; }

GptModel::OffloadTraffic GptModel::offload_traffic() const {
  if (!impl_->offload) return {};
  return {impl_->offload->bytes_out(), impl_->offload->bytes_in()};
}

const TpTraffic& GptModel::tp_traffic() { return impl_->tp.traffic(); }
void GptModel::reset_tp_traffic() { impl_->tp.reset_traffic(); }

}  // namespace strata::gpt
