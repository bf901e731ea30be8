// GptModel: units, spec init, and forward/backward of the spec's GPT-2 over ShardedModel, through the GptKernels of
// the model's device.
#include "models/gpt/model/gpt_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/hash.h"
#include "models/gpt/model/block_activations.h"
#include "models/gpt/model/kernel_table.h"
#include "runtime/context/ring_attention.h"
#include "runtime/memory/activation_offload.h"
#include "runtime/tensor/parallel_linear.h"
#include "runtime/tensor/vocab_parallel.h"
#include "core/checked_math.h"
#include "core/error.h"

namespace strata::gpt {

// ---- configuration and units ------------------------------------------------------------------------------------

void GptConfig::validate() const {
  STRATA_CHECK(layers >= 1, "--layers {} must be at least 1", layers);
  STRATA_CHECK(heads >= 1 && embd >= 1 && embd % heads == 0, "--embd {} must be a positive multiple of --heads {}",
               embd, heads);
  STRATA_CHECK(vocab >= 2 && vocab <= 65536, "--vocab {} must be in [2, 65536] (tokens are uint16)", vocab);
  STRATA_CHECK(ctx >= 1, "--ctx {} must be at least 1", ctx);
}

void GptConfig::validate_tp(int tp, bool sequence_parallel, int seq) const {
  STRATA_CHECK(tp >= 1, "--tp {} must be at least 1", tp);
  STRATA_CHECK(heads % tp == 0, "--heads {} must divide by --tp {} (each tensor-parallel rank holds whole heads)",
               heads, tp);
  STRATA_CHECK(embd % tp == 0, "--embd {} must divide by --tp {}", embd, tp);
  STRATA_CHECK(!sequence_parallel || seq % tp == 0,
               "--seq {} must divide by --tp {} under --sequence-parallel (each rank holds seq / tp positions)", seq,
               tp);
}

void GptConfig::validate_sizes(int batch, int seq, int tp) const {
  STRATA_CHECK(batch >= 1 && seq >= 1 && tp >= 1, "--batch {}, --seq {} and --tp {} must be at least 1", batch, seq,
               tp);
  // The kernels index rows with int: batch x seq must fit one.
  const int rows = checked_mul<int>(batch, seq, "tokens per micro-batch (--batch x --seq)");
  const std::uint64_t C = static_cast<std::uint64_t>(embd), Cl = C / static_cast<std::uint64_t>(tp);
  const std::uint64_t Vl = static_cast<std::uint64_t>(vocab_per_rank(*this, tp));
  // Parameters on one rank: per block 12 C^2 / tp + 13 C (at least the split's share), wte's rows and wpe (ln_f's
  // 2 C is within the bound's slack). Every later size is a small multiple of one of these.
  const std::uint64_t block =
      checked_add<std::uint64_t>(checked_product("a block's parameters (12 x --embd x --embd / --tp)", 12, C, Cl),
                                 checked_product("a block's vectors (13 x --embd)", 13, C), "a block's parameters");
  std::uint64_t params = checked_product("the blocks' parameters (--layers x a block)", layers, block);
  params = checked_add<std::uint64_t>(params, checked_product("wte (--vocab / --tp x --embd)", Vl, C), "parameters");
  params = checked_add<std::uint64_t>(params, checked_product("wpe (--ctx x --embd)", ctx, C), "parameters");
  // f32 parameters, their gradients and AdamW's two moments: 16 bytes each when nothing is sharded.
  check_addressable(checked_product("the parameters' f32 state (16 bytes x parameters)", 16, params),
                    fmt::format("{} parameters per rank (f32 weights, gradients and AdamW moments)", params).c_str());
  // Activations kept for the backward: about 16 [rows, C] arrays per block, plus the logits [rows, vocab / tp].
  const std::uint64_t acts = checked_product("the activations (4 bytes x (--layers + 1) x --batch x --seq x 16 x "
                                             "--embd)",
                                             4, static_cast<std::uint64_t>(layers) + 1, rows, 16, C);
  const std::uint64_t logits = checked_product("the logits (4 bytes x --batch x --seq x --vocab / --tp)", 4, rows, Vl);
  check_addressable(checked_add<std::uint64_t>(acts, logits, "activations and logits"),
                    fmt::format("the activations of {} rows x {} tokens (--batch x --seq) at --embd {}, --vocab {}",
                                batch, seq, embd, vocab)
                        .c_str());
}

std::string GptConfig::describe() const {
  return fmt::format("GPT-2 L={} H={} C={} V={} ctx={}", layers, heads, embd, vocab, ctx);
}

namespace {
// Slot order inside a block unit (the kernels index views by it).
enum BlockSlot {
  kLn1W, kLn1B, kAttnW, kAttnB, kProjW, kProjB, kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB, kBlockSlots
};
enum EmbSlot { kWte, kWpe };
enum LnfSlot { kLnfW, kLnfB };
}  // namespace

int vocab_per_rank(const GptConfig& cfg, int tp) { return (cfg.vocab + tp - 1) / tp; }

std::vector<UnitSpec> gpt_units(const GptConfig& c, int tp) {
  const std::int64_t C = c.embd;
  // A slot of global shape `g`, cut along `dim` (-1: replicated) in `parts` blocks over the tp ranks.
  auto slot = [tp](std::string name, std::vector<std::int64_t> g, bool decay, int dim = -1, int parts = 1) {
    SlotSpec s;
    s.name = std::move(name);
    s.shape = g;
    s.weight_decay = decay;
    if (dim >= 0) {
      s.tp = TpSplit{dim, parts, g};
      s.shape = s.tp.local_shape(tp);
    }
    return s;
  };
  std::vector<UnitSpec> units;
  // 2-D parameters are decayed, 1-D ones are not (spec, Step 4).
  units.push_back({"embeddings", {slot("wte.weight", {c.vocab, C}, true, 0), slot("wpe.weight", {c.ctx, C}, true)}});
  for (int i = 0; i < c.layers; ++i) {
    std::string p = "h." + std::to_string(i) + ".";
    units.push_back({"h." + std::to_string(i),
                     {slot(p + "ln_1.weight", {C}, false),
                      slot(p + "ln_1.bias", {C}, false),
                      slot(p + "attn.c_attn.weight", {C, 3 * C}, true, 1, 3),  // column-parallel, q|k|v by heads
                      slot(p + "attn.c_attn.bias", {3 * C}, false, 0, 3),
                      slot(p + "attn.c_proj.weight", {C, C}, true, 0),  // row-parallel
                      slot(p + "attn.c_proj.bias", {C}, false),
                      slot(p + "ln_2.weight", {C}, false),
                      slot(p + "ln_2.bias", {C}, false),
                      slot(p + "mlp.c_fc.weight", {C, 4 * C}, true, 1),  // column-parallel
                      slot(p + "mlp.c_fc.bias", {4 * C}, false, 0),
                      slot(p + "mlp.c_proj.weight", {4 * C, C}, true, 0),  // row-parallel
                      slot(p + "mlp.c_proj.bias", {C}, false)}});
  }
  units.push_back({"ln_f", {slot("ln_f.weight", {C}, false), slot("ln_f.bias", {C}, false)}});
  return units;
}

GptStagePart GptStagePart::of_rank(const GptConfig& cfg, int pp, int virtual_stages, int rank, int slots) {
  GptStagePart part;
  const std::vector<LayerRange> ranges = split_layers(cfg.layers, pp, virtual_stages);
  for (int v = 0; v < virtual_stages; ++v) part.chunks.push_back(ranges[static_cast<std::size_t>(v * pp + rank)]);
  part.first = rank == 0;
  part.last = rank == pp - 1;
  part.slots = slots;
  return part;
}

GptStageUnits stage_units(const GptConfig& cfg, const GptStagePart& part) {
  const std::vector<LayerRange> chunks = part.chunks.empty() ? std::vector<LayerRange>{{0, cfg.layers}} : part.chunks;
  GptStageUnits u;
  int next = 0;
  if (part.first) u.emb = 0;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    u.first.push_back(next);
    next += chunks[c].count() + (c == 0 && part.first ? 1 : 0);
    if (c + 1 == chunks.size() && part.last) {
      u.lnf = next++;
      u.head = part.first ? u.emb : next++;
    }
  }
  u.first.push_back(next);
  return u;
}

std::vector<UnitSpec> gpt_units(const GptConfig& cfg, int tp, const GptStagePart& part) {
  std::vector<UnitSpec> all = gpt_units(cfg, tp), units;
  if (part.chunks.empty()) return all;
  if (part.first) units.push_back(all[static_cast<std::size_t>(embeddings_unit())]);
  for (const LayerRange& r : part.chunks)
    for (int l = r.first; l < r.last; ++l) units.push_back(all[static_cast<std::size_t>(block_unit(l))]);
  if (part.last) units.push_back(all[static_cast<std::size_t>(final_norm_unit(cfg))]);
  if (part.holds_tied_copy()) {
    units.push_back(all[static_cast<std::size_t>(embeddings_unit())]);
    units.back().name = kTiedHeadUnit;
  }
  return units;
}

int embeddings_unit() { return 0; }
int block_unit(int layer) { return 1 + layer; }
int final_norm_unit(const GptConfig& cfg) { return 1 + cfg.layers; }

namespace {
double unit_uniform(std::uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
}  // namespace

void spec_init(const GptConfig& cfg, const ParamSlot& slot, std::size_t begin, std::size_t count, float* out,
               std::uint64_t seed) {
  const std::string& n = slot.name;
  auto ends = [&](const char* s) { return n.size() >= std::strlen(s) && n.compare(n.size() - std::strlen(s), std::string::npos, s) == 0; };
  if (ends(".bias")) {
    std::fill(out, out + count, 0.0f);
    return;
  }
  if (ends("ln_1.weight") || ends("ln_2.weight") || n == "ln_f.weight") {
    std::fill(out, out + count, 1.0f);
    return;
  }
  double sigma = 0.02;
  if (ends("c_proj.weight")) sigma = 0.02 / std::sqrt(2.0 * cfg.layers);
  std::uint64_t h = fnv1a(n);
  for (std::size_t k = 0; k < count; ++k) {
    // Box-Muller on two counter-based uniforms: element (begin + k) of this parameter, for this seed.
    std::uint64_t idx = begin + k;
    double u1 = unit_uniform(splitmix64(h ^ splitmix64(seed ^ splitmix64(2 * idx))));
    double u2 = unit_uniform(splitmix64(h ^ splitmix64(seed ^ splitmix64(2 * idx + 1))));
    out[k] = static_cast<float>(sigma * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
}

// ---- the model ---------------------------------------------------------------------------------------------------

namespace {

// One unit's parameters (and gradients) as f32 arrays: the gathered views themselves when they are f32, else
// converted copies in a workspace buffer (gradients added back into the views after the backward). A slot marked
// `tp_summed` gets its gradient in a zeroed scratch instead, summed over the tp group at close_grads and then added:
// under sequence parallelism each tp rank's share of a replicated parameter's gradient comes from its own positions.
class UnitF32 {
 public:
  UnitF32(Device& dev, GptKernels& k, std::size_t max_numel) : k_(k) {
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
  void open_grads(const std::vector<TensorView>& views, const std::vector<int>& tp_summed = {}) {
    g_.clear();
    scratch_.assign(views.size(), false);
    for (int k : tp_summed) scratch_[static_cast<std::size_t>(k)] = true;
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
  const float* p(int k) const { return p_[static_cast<std::size_t>(k)]; }
  float* g(int k) const { return g_[static_cast<std::size_t>(k)]; }

 private:
  GptKernels& k_;
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
  Buffer lnf, lnf_mean, lnf_rstd, logits, losses;  // the last stage
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

struct GptModel::Impl {
  GptConfig cfg;
  ShardedModel& model;
  Device& dev;
  std::unique_ptr<GptKernels> k;  // every kernel, zeroing, conversion and copy goes through it
  int B, T, N;
  RecomputePolicy recompute;
  TensorParallel tp;
  // Tensor-parallel data flow: at tp 1 (unless asked for) the plain kernels run exactly as before it existed.
  bool tpk;
  bool sp;
  int Nl;              // rows of the sequence-sharded regions on this rank
  int Cl, NHl;         // this rank's channels and heads of attention (C / tp, NH / tp)
  VocabShard vocab;    // this rank's vocabulary rows, the first, and how many are real (not padding)
  int Vl;              // vocab.rows
  // The Megatron split of a block: q|k|v and c_fc column-parallel, the two c_proj row-parallel (set once tp is checked).
  std::optional<ColumnParallelLinear> qkv_lin, fc_lin;
  std::optional<RowParallelLinear> proj_lin, fcproj_lin;
  std::vector<int> block_tp_summed, emb_tp_summed, lnf_tp_summed;  // replicated slots summed over tp (SP)
  GptStagePart part;
  std::vector<int> unit_of_layer;       // the ShardedModel unit of each layer this rank holds (-1: elsewhere)
  int u_emb = -1, u_lnf = -1, u_head = -1;  // the embeddings, ln_f and the unit whose wte is the LM head
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
  std::unique_ptr<UnitF32> emb, unit;
  // Context parallelism: this rank's chunks of each row and the ring that attends over the whole sequence.
  std::optional<ContextChunks> chunks;
  std::unique_ptr<RingAttention> ring;

  Impl(const GptConfig& c, ShardedModel& m, Device& d, int b, int t, const RecomputePolicy& rc, const GptParallel& par,
       const GptStagePart& stage_part, const GptPrecision& precision)
      : cfg(c), model(m), dev(d), k(make_gpt_kernels(d, precision.matmul)), B(b), T(t), N(b * t), recompute(rc),
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
    Cl = cfg.embd / P;
    NHl = cfg.heads / P;
    vocab = VocabShard::of(cfg.vocab, P, tp.rank());
    Vl = vocab.rows;
    qkv_lin.emplace(tp, *k, cfg.embd, 3 * cfg.embd, 3);
    fc_lin.emplace(tp, *k, cfg.embd, 4 * cfg.embd);
    proj_lin.emplace(tp, *k, cfg.embd, cfg.embd);
    fcproj_lin.emplace(tp, *k, 4 * cfg.embd, cfg.embd);
    if (sp) {
      block_tp_summed = {kLn1W, kLn1B, kLn2W, kLn2B};
      emb_tp_summed = {kWpe};
      lnf_tp_summed = {kLnfW, kLnfB};
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
    const std::size_t nl = static_cast<std::size_t>(Nl), cl = static_cast<std::size_t>(Cl);
    // validate_sizes bounded every product below; the byte counts are checked once more where they are formed.
    auto bytes = [](std::size_t floats) { return checked_mul<std::size_t>(floats, 4, "buffer bytes (4 x floats)"); };
    auto act = [&](std::size_t floats) { return dev.allocate(bytes(floats), MemCategory::kActivations); };
    auto work = [&](std::size_t floats) { return dev.allocate(bytes(floats), MemCategory::kWorkspace); };
    std::array<std::size_t, kNumBlockActs> act_bytes{};
    for (int a = 0; a < kNumBlockActs; ++a)
      act_bytes[static_cast<std::size_t>(a)] = bytes(act_floats(a, n, nl, C, cl, static_cast<std::size_t>(NHl),
                                                                static_cast<std::size_t>(T)));
    const PositionPlan plan = plan_positions(part.chunks, recompute);  // plan.keep has `widest` positions
    auto block_acts = [&](ActMask mask, MemCategory kind) {
      BlockActs set;
      for (int a = 0; a < kNumBlockActs; ++a)
        if (mask & act_bit(a))
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
        mb.lnf_mean = act(nl);
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
    datty = work(n * cl);
    dqkv = work(n * 3 * cl);
    dfch = work(n * 4 * cl);
    dfch_gelu = work(n * 4 * cl);
    if (pipelined && !(part.last && part.chunks.size() == 1)) dnext = work(nl * C);
    for (MicroActs& mb : micro) {
      if (part.first) mb.tokens_in = dev.allocate(n * sizeof(std::int32_t), MemCategory::kWorkspace);
      if (part.last) mb.tokens_tgt = dev.allocate(n * sizeof(std::int32_t), MemCategory::kWorkspace);
    }
    std::size_t emb_numel = 0, max_numel = 0;
    for (int u = 0; u < model.num_units(); ++u) {
      if (u == u_emb || u == u_head) emb_numel = std::max(emb_numel, model.layout(u).padded_numel());
      else max_numel = std::max(max_numel, model.layout(u).padded_numel());
    }
    if (emb_numel > 0) emb = std::make_unique<UnitF32>(dev, *k, emb_numel);
    if (max_numel > 0) unit = std::make_unique<UnitF32>(dev, *k, max_numel);
    if (chunks) ring = std::make_unique<RingAttention>(*par.cp, *k, *chunks, B, Cl, NHl);
  }

  // The attention core of a block, over this rank's rows (a ring over the cp group under context parallelism).
  void attention_forward(float* out, float* lse, const float* qkv) {
    if (ring) ring->forward(out, lse, qkv);
    else k->attention_forward(out, lse, qkv, B, T, Cl, NHl);
  }
  void attention_backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv) {
    if (ring) ring->backward(dqkv, dout, out, lse, qkv);
    else k->attention_backward(dqkv, dout, out, lse, qkv, B, T, Cl, NHl);
  }
  // Under the tp kernels: the position embedding of this rank's rows added to x0 (its chunks' positions under cp, its
  // sequence-parallel share's otherwise), and its gradient.
  void positions_forward(float* x0) {
    const int C = cfg.embd;
    if (!chunks) {
      k->position_forward(x0, emb->p(kWpe), B, tp.local_positions(), tp.first_position(), C);
      return;
    }
    for_each_chunk(
        [&](std::size_t row, int pos, int n) { k->position_forward(x0 + row * C, emb->p(kWpe), 1, n, pos, C); });
  }
  void positions_backward(const float* dx0) {
    const int C = cfg.embd;
    if (!chunks) {
      k->position_backward(emb->g(kWpe), dx0, B, tp.local_positions(), tp.first_position(), C);
      return;
    }
    for_each_chunk(
        [&](std::size_t row, int pos, int n) { k->position_backward(emb->g(kWpe), dx0 + row * C, 1, n, pos, C); });
  }
  // The token and position embeddings of the micro-batch's rows into x0; under context parallelism each of this
  // rank's two chunks of a row takes the positions of its place in the sequence.
  void embed(float* x0, const std::int32_t* tokens) {
    const int C = cfg.embd;
    if (!chunks) {
      k->encoder_forward(x0, tokens, emb->p(kWte), emb->p(kWpe), B, T, C);
      return;
    }
    for_each_chunk([&](std::size_t row, int pos, int n) {
      k->encoder_forward(x0 + row * C, tokens + row, emb->p(kWte), emb->p(kWpe) + static_cast<std::size_t>(pos) * C,
                         1, n, C);
    });
  }
  void embed_backward(const float* dx0, const std::int32_t* tokens) {
    const int C = cfg.embd;
    if (!chunks) {
      k->encoder_backward(emb->g(kWte), emb->g(kWpe), dx0, tokens, B, T, C);
      return;
    }
    for_each_chunk([&](std::size_t row, int pos, int n) {
      k->encoder_backward(emb->g(kWte), emb->g(kWpe) + static_cast<std::size_t>(pos) * C, dx0 + row * C,
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
      case BlockRecompute::kMlp:
        k->gelu_forward(a[kActFchGelu], a[kActFch], static_cast<std::size_t>(N) * 4 * Cl);
        break;
      case BlockRecompute::kNone:
      case BlockRecompute::kOffload: break;
    }
  }

  // LayerNorm of this rank's rows of x into `out` ([Nl, C]); returns it whole ([N, C]: gathered along the sequence
  // into ln_full under SP).
  const float* layernorm_whole(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b) {
    k->layernorm_forward(out, mean, rstd, x, w, b, Nl, cfg.embd);
    return whole(out);
  }
  // A LayerNorm output kept on this rank's rows, whole: gathered into ln_full under SP, else itself.
  const float* whole(const float* ln) { return tp.to_full(ln, ln_full.as<float>(), cfg.embd); }

  // A row-parallel c_proj: (inp @ weight) reduced over tp, plus bias once, on this rank's rows ([Nl, C]). Without
  // the tensor-parallel data flow, the plain product with its bias.
  const float* row_parallel(RowParallelLinear& lin, float* scratch, const float* inp, const float* weight,
                            const float* bias) {
    if (tpk) return lin.forward(scratch, reduced.as<float>(), inp, weight, bias);
    k->matmul_forward(scratch, inp, weight, bias, N, lin.local_in(), cfg.embd);
    return scratch;
  }

  // Block `local` of a chunk: x_in[local] to x_in[local + 1].
  void block_forward(MicroActs& mb, int local, const UnitF32& p, const BlockViews& a) {
    const int C = cfg.embd;
    const std::size_t nlC = static_cast<std::size_t>(Nl) * C;
    const float* x = mb.x_in[static_cast<std::size_t>(local)].as<float>();
    float* out = mb.x_in[static_cast<std::size_t>(local) + 1].as<float>();
    k->layernorm_forward(a[kActLn1], a[kActLn1Mean], a[kActLn1Rstd], x, p.p(kLn1W),
                         p.p(kLn1B), Nl, C);
    qkv_lin->forward(a[kActQkv], a[kActLn1], ln_full.as<float>(), p.p(kAttnW), p.p(kAttnB));
    attention_forward(a[kActAtty], a[kActLse], a[kActQkv]);
    const float* proj = row_parallel(*proj_lin, attproj.as<float>(), a[kActAtty], p.p(kProjW), p.p(kProjB));
    k->residual_forward(a[kActXmid], x, proj, nlC);
    k->layernorm_forward(a[kActLn2], a[kActLn2Mean], a[kActLn2Rstd], a[kActXmid],
                         p.p(kLn2W), p.p(kLn2B), Nl, C);
    fc_lin->forward(a[kActFch], a[kActLn2], ln_full.as<float>(), p.p(kFcW), p.p(kFcB));
    k->gelu_forward(a[kActFchGelu], a[kActFch], static_cast<std::size_t>(N) * 4 * Cl);
    const float* mlp =
        row_parallel(*fcproj_lin, fcproj.as<float>(), a[kActFchGelu], p.p(kFcProjW), p.p(kFcProjB));
    k->residual_forward(out, a[kActXmid], mlp, nlC);
  }

  // The gradient of the LM head's input, summed over tp into this rank's rows (dln holds this rank's partial
  // [N, C]). Returns it ([Nl, C]).
  const float* reduce_input_grad() {
    if (!tpk) return dln.as<float>();
    return tp.reduce_partial(dln.as<float>(), sp ? dln_local.as<float>() : dln.as<float>(), cfg.embd);
  }

  // dres holds d(block output) on entry and d(block input) on exit (this rank's rows).
  void block_backward(MicroActs& mb, int local, const UnitF32& p, const BlockViews& a) {
    const int C = cfg.embd;
    const std::size_t N4 = static_cast<std::size_t>(N) * 4 * Cl;
    const float* x = mb.x_in[static_cast<std::size_t>(local)].as<float>();
    float* d = dres.as<float>();
    // The row-parallel c_proj: its output gradient is whole on every tp rank (gathered under SP), so the bias's
    // gradient is the whole one and equal across the tp ranks.
    float* dfull_p = dfull.as<float>();
    fcproj_lin->backward(dfch_gelu.as<float>(), dfull_p, p.g(kFcProjW), p.g(kFcProjB), d, a[kActFchGelu],
                         p.p(kFcProjW));
    k->zero(dfch.data(), N4 * 4);
    k->gelu_backward(dfch.as<float>(), a[kActFch], dfch_gelu.as<float>(), N4);
    const float* dln2 = fc_lin->backward(dln.as<float>(), dln_local.as<float>(), p.g(kFcW), p.g(kFcB),
                                         dfch.as<float>(), whole(a[kActLn2]), p.p(kFcW));
    k->layernorm_backward(d, p.g(kLn2W), p.g(kLn2B), dln2, a[kActXmid], p.p(kLn2W), a[kActLn2Mean],
                          a[kActLn2Rstd], Nl, C);
    proj_lin->backward(datty.as<float>(), dfull_p, p.g(kProjW), p.g(kProjB), d, a[kActAtty], p.p(kProjW));
    k->zero(dqkv.data(), static_cast<std::size_t>(N) * 3 * Cl * 4);
    attention_backward(dqkv.as<float>(), datty.as<float>(), a[kActAtty], a[kActLse], a[kActQkv]);
    const float* dln1 = qkv_lin->backward(dln.as<float>(), dln_local.as<float>(), p.g(kAttnW), p.g(kAttnB),
                                          dqkv.as<float>(), whole(a[kActLn1]), p.p(kAttnW));
    k->layernorm_backward(d, p.g(kLn1W), p.g(kLn1B), dln1, x, p.p(kLn1W), a[kActLn1Mean],
                          a[kActLn1Rstd], Nl, C);
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
                                         emb->p(kWte), vocab, C);
        positions_forward(x0);
      }
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
                                               unit->p(kLnfW), unit->p(kLnfB));
      model.end_forward(u_lnf);
      if (!first) emb->load(model.begin_forward(u_head));
      float* logits = mb.logits.as<float>();
      const std::int32_t* targets = mb.tokens_tgt.as<std::int32_t>();
      k->lm_head_forward(logits, lnf_whole, emb->p(kWte), N, C, Vl);
      if (!tpk) {
        k->crossentropy_softmax(mb.losses.as<float>(), logits, logits, targets, N, V, dscale);
      } else {
        // Vocabulary-parallel: the row maxima and the sums of exponentials are reduced over tp, never the logits.
        vocab_parallel_cross_entropy(*k, tp, mb.losses.as<float>(), logits, logits, targets, vocab, dscale,
                                     vocab_max.as<float>(), vocab_stats.as<float>());
      }
      if (!first) model.end_forward(u_head);
    }
    if (first) model.end_forward(u_emb);
    if (last) loss = k->sum(mb.losses.as<float>(), static_cast<std::size_t>(N)) / N;
    return loss;
  }

  // Backward of one chunk for the micro-batch in `slot`: from the loss (last stage) or from dnext, the gradient the
  // next stage sent; leaves d(chunk input) in dres unless the chunk is the first stage.
  void backward_chunk(int chunk, int slot) {
    const int C = cfg.embd;
    const LayerRange& r = chunk_of(chunk);
    MicroActs& mb = slot_of(slot);
    const bool first = has_embeddings(chunk), last = has_head(chunk);
    std::optional<BackwardViews> ev;  // the embeddings (first stage) or the LM head's unit (last stage)
    if (first || last) {
      ev.emplace(model.begin_backward(first ? u_emb : u_head));
      emb->load(ev->params);
      emb->open_grads(ev->grads, emb_tp_summed);
    }
    if (last) {
      k->zero(dln.data(), static_cast<std::size_t>(N) * C * 4);
      k->lm_head_backward(dln.as<float>(), emb->g(kWte), mb.logits.as<float>(), whole(mb.lnf.as<float>()),
                          emb->p(kWte), N, C, Vl);
      const float* dlnf = reduce_input_grad();
      BackwardViews fv = model.begin_backward(u_lnf);
      unit->load(fv.params);
      unit->open_grads(fv.grads, lnf_tp_summed);
      k->zero(dres.data(), static_cast<std::size_t>(Nl) * C * 4);
      k->layernorm_backward(dres.as<float>(), unit->g(kLnfW), unit->g(kLnfB), dlnf,
                            mb.x_in[static_cast<std::size_t>(r.count())].as<float>(), unit->p(kLnfW),
                            mb.lnf_mean.as<float>(), mb.lnf_rstd.as<float>(), Nl, C);
      unit->close_grads(fv.grads, tp, lnf_tp_summed);
      model.end_backward(u_lnf);
      if (!first) {  // the copy's gradient is complete: hand the unit back before the blocks
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
      unit->open_grads(bv.grads, block_tp_summed);
      block_backward(mb, local, *unit, a);
      unit->close_grads(bv.grads, tp, block_tp_summed);
      model.end_backward(u);
      if (set >= 0) offload->end_backward(set);
    }
    if (first) {
      if (!tpk) {
        embed_backward(dres.as<float>(), mb.tokens_in.as<std::int32_t>());
      } else {
        positions_backward(dres.as<float>());
        vocab_parallel_embedding_backward(*k, tp, emb->g(kWte), dres.as<float>(), dfull.as<float>(),
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
